"""The README's test command is what CI runs; the README names only commands that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command() -> None:
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)
    test_command = next(b for b in blocks if "pytest" in b and "voltbus up" not in b)
    assert test_command.strip() in (ROOT / ".ci" / "run").read_text()


def test_readme_main_command_is_up_until_the_learner_ends() -> None:
    """The command tests/test_up.py runs (cut to 2 steps) in test_the_main_command_trains_and_ends_with_the_learner."""
    main = "pip install -e '.[learn]' && .venv/bin/voltbus up --exit-code-from learner"
    assert main in (ROOT / "README.md").read_text()
