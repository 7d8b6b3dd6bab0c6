"""``python -m voltbus.services.runner module:attr``: the same as ``voltbus runner --agent module:attr``."""

import sys

from voltbus.services.log import configure_logging
from voltbus.services.runner.app import main
from voltbus.services.settings import Settings

settings = Settings()
configure_logging(settings.log_level)
sys.exit(main(settings, sys.argv[1]))  # a bad agent path: one line and exit code 1, as in the ``voltbus`` CLI
