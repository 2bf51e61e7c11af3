"""The compat tests' ZooKeeper: it lives in ``strom.testing.zookeeper`` (the test broker's cluster
variant uses it too); this module keeps the names the cluster tests import."""
from strom.testing.zookeeper import (ZooKeeperError, ZooKeeperServer, four_letter_word, free_port,  # noqa: F401
                                     require_all, unavailable, zookeeper_fixture, zookeeper_jar)
