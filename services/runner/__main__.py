"""``python -m voltbus.services.runner module:attr``: the same as ``voltbus runner --agent module:attr``."""

import asyncio
import sys

from voltbus.schemas.errors import VoltbusError
from voltbus.services.log import configure_logging
from voltbus.services.runner.app import serve_until_signal
from voltbus.services.settings import Settings

settings = Settings()
configure_logging(settings.log_level)
try:  # what the user can fix (a bad agent path) is one line and exit code 1, as in the ``voltbus`` CLI
    asyncio.run(serve_until_signal(settings, sys.argv[1]))
except VoltbusError as exc:
    sys.exit(f"voltbus: error: {exc}")
