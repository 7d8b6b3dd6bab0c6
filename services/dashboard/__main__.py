"""``python -m voltbus.services.dashboard``: the same as ``voltbus dashboard``."""

import asyncio

from voltbus.services.dashboard.app import run
from voltbus.services.log import configure_logging
from voltbus.services.settings import Settings

settings = Settings()
configure_logging(settings.log_level)
asyncio.run(run(settings))
