"""``python -m voltbus.services.projector``: the same as ``voltbus projector``."""

import asyncio

from voltbus.services.log import configure_logging
from voltbus.services.projector.app import run
from voltbus.services.settings import Settings

settings = Settings()
configure_logging(settings.log_level)
asyncio.run(run(settings))
