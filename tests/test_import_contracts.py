"""The import contracts of pyproject.toml's [tool.importlinter] hold (lint-imports over the whole import root)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "structure.py"), "contracts"], capture_output=True, text=True, timeout=110
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout, run.stdout
