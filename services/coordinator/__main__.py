"""``python -m voltbus.services.coordinator``: the same as ``voltbus coordinator``."""

import asyncio

from voltbus.services.coordinator.app import run
from voltbus.services.log import configure_logging
from voltbus.services.settings import Settings

settings = Settings()
configure_logging(settings.log_level)
asyncio.run(run(settings))
