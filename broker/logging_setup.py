"""Structured, quiet-by-default logging: one line per event, `key=value` pairs after the message."""

from __future__ import annotations

import logging
import sys
import time


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = (
            f"{stamp}.{int(record.msecs):03d}Z level={record.levelname.lower()} logger={record.name} "
            f'msg="{record.getMessage()}"'
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
