"""``python -m voltbus.services.runner module:attr``: the same as ``voltbus runner --agent module:attr`` (its
settings, its one-line errors and exit codes)."""

import sys

from voltbus.services import loop
from voltbus.services.log import configure_logging, one_line_errors
from voltbus.services.runner.app import serve_until_signal
from voltbus.services.settings import Settings

agent = sys.argv[1] if len(sys.argv) > 1 else sys.exit("usage: python -m voltbus.services.runner module:attr")
with one_line_errors():
    settings = Settings()
    configure_logging(settings.log_level)
    loop.run(serve_until_signal(settings, agent))
