"""``python -m voltbus.services.storeserver``: the same as ``voltbus store-server``."""

import asyncio

from voltbus.services.log import configure_logging
from voltbus.services.settings import Settings
from voltbus.services.storeserver.app import run

settings = Settings()
configure_logging(settings.log_level)
asyncio.run(run(settings))
