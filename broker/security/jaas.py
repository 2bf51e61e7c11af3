"""Kafka's ``sasl.jaas.config`` values: ``<LoginModule class> <flag> key="value" ... ;``."""

from __future__ import annotations

import re

from ..config import ConfigError

_ENTRY = re.compile(
    r'\s*([A-Za-z_$][\w.$]*)\s+(required|requisite|sufficient|optional)((?:\s+[^\s=;]+\s*=\s*(?:"(?:\\.|[^"\\])*"|[^\s;"]+))*)\s*;\s*'
)
_OPTION = re.compile(r'([^\s=;]+)\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^\s;"]+))')


def parse_jaas(text: str, key: str) -> tuple[str, dict[str, str]]:
    """(login module class, options) of one JAAS entry; ConfigError names ``key`` (never the value,
    which holds passwords)."""
    match = _ENTRY.fullmatch(text or "")
    if not match:
        raise ConfigError(
            f"{key}: expected '<LoginModule class> required key=\"value\" ... ;' "
            f"(one login module, ending with a semicolon)"
        )
    options = {}
    for option in _OPTION.finditer(match.group(3)):
        value = option.group(2) if option.group(2) is not None else option.group(3)
        options[option.group(1)] = re.sub(r"\\(.)", r"\1", value)
    return match.group(1), options
