"""``python -m voltbus.services.runner module:attr``: the same as ``voltbus runner --agent module:attr``."""

import asyncio
import sys

from voltbus.services.log import configure_logging
from voltbus.services.runner.app import serve_until_signal
from voltbus.services.settings import Settings

settings = Settings()
configure_logging(settings.log_level)
asyncio.run(serve_until_signal(settings, sys.argv[1]))
