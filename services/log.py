"""Logging set-up, done once by the CLI: stdlib logging with key=value context."""

from __future__ import annotations

import logging
import sys


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
