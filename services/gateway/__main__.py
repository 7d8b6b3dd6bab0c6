"""``python -m voltbus.services.gateway``: the same as ``voltbus gateway``."""

import asyncio

from voltbus.services.gateway.app import run
from voltbus.services.log import configure_logging
from voltbus.services.settings import Settings

settings = Settings()
configure_logging(settings.log_level)
asyncio.run(run(settings))
