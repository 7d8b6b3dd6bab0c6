"""Every Python package of the source tree is in the wheel: ``pyproject.toml`` lists packages by hand."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_listed_for_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    where = {directory: name for name, directory in config["package-dir"].items()}
    found = set()
    for top, name in where.items():
        for init in (ROOT / top).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name, *parts)))
    assert found - set(config["packages"]) == set(), "add these to [tool.setuptools] packages"
    assert set(config["packages"]) - found == set(), "these are listed but have no __init__.py"
