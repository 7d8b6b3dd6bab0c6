"""``python -m voltbus.services.inference``: ``voltbus inference`` (model: ``VOLTBUS_INFERENCE__MODEL_DIR``)."""

import asyncio

from voltbus.services.inference.app import run
from voltbus.services.log import configure_logging
from voltbus.services.settings import Settings

settings = Settings()
configure_logging(settings.log_level)
asyncio.run(run(settings))
