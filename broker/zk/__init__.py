"""The ZooKeeper layer: znode paths and JSON (zkdata, pure), kazoo I/O (zkclient), the controller."""
