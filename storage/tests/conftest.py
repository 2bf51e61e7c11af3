import pytest

from strom.storage.config import LogConfig
from strom.storage.log import Log


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def open_log(tmp_path, clock):
    """open_log(config=None, **kw) -> Log in tmp_path/topic-0; every opened log is closed."""
    opened = []

    def _open(config: LogConfig | None = None, **kwargs) -> Log:
        log = Log.open(tmp_path / "topic-0", config or LogConfig(), now_ms=clock, **kwargs)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()
