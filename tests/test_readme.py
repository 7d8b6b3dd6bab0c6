"""The README's test command is what CI runs; the README names only commands that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command() -> None:
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)
    test_command = next(b for b in blocks if "pytest" in b and "voltbus demo" not in b)
    assert test_command.strip() in (ROOT / ".ci" / "run").read_text()


def test_readme_main_command_runs_the_demo() -> None:
    assert "pip install -e '.[learn]' && .venv/bin/voltbus demo" in (ROOT / "README.md").read_text()
