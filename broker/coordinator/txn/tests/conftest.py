"""Fixtures of the transaction coordinator's tests."""

from __future__ import annotations

import pytest

from strom.broker.tests.helpers import transaction_env

# (broker, client, restart) with the transaction coordinator running
env = pytest.fixture(transaction_env, name="env")
