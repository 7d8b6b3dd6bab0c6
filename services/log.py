"""Logging set-up, done once by the CLI: stdlib logging with key=value context; and how a command ends on
an error (one line, exit code 1), shared by the CLI and the services' ``python -m`` entry points."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from voltbus.schemas.errors import VoltbusError


def configure_logging(level: str = "INFO") -> None:
    """Send every voltbus logger's records to stderr as ``time level logger message``."""
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        force=True,
    )
    logging.getLogger("nats").setLevel(logging.CRITICAL)  # its errors reach us through callbacks
    for chatty in ("httpx", "httpcore"):  # a line per request: thousands a minute in a runner
        logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLevelName(level.upper())))


@contextmanager
def one_line_errors() -> Iterator[None]:
    """End the command on a voltbus error with one line on stderr and exit code 1; on Ctrl-C with 130."""
    try:
        yield
    except VoltbusError as exc:
        print(f"voltbus: error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
