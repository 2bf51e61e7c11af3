"""This project's own `tools` package (not Strom's: Strom installs as `strom.tools`)."""

OWNER = "sample-project"


def encode(order_id: int, item: str) -> bytes:
    return f"{order_id}:{item}".encode()


def decode(value: bytes) -> tuple[int, str]:
    order_id, item = value.decode().split(":", 1)
    return int(order_id), item
