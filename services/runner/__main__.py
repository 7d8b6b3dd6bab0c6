"""``python -m voltbus.services.runner module:attr``: the same as ``voltbus runner --agent module:attr`` (its
settings, its one-line errors and exit codes)."""

import sys

from voltbus.cli import main

sys.argv[1:] = ["runner", "--agent", *sys.argv[1:2]]
main()
