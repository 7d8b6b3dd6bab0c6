"""``python -m voltbus.services.learner TASKS.jsonl``: the learner with settings from the environment."""

import sys
from pathlib import Path

from voltbus.services.log import configure_logging
from voltbus.services.settings import Settings

from .app import load_tasks, main

settings = Settings()
configure_logging(settings.log_level)
main(settings, load_tasks(Path(sys.argv[1])), print)
