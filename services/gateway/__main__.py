"""``python -m voltbus.services.gateway``: the same as ``voltbus gateway``."""

from voltbus.services.gateway.app import main
from voltbus.services.log import configure_logging
from voltbus.services.settings import Settings

settings = Settings()
configure_logging(settings.log_level)
main(settings)
