"""Every module's doctests pass, in every package of the import root (found, never listed by hand).

The packages are pyproject.toml's ``package-dir`` (``voltbus`` and the folders mapped under it) and all
their sub-modules except ``__main__``. The one rule for skipping: a module whose import needs a package
of the ``gpu`` extra (verl, vllm) that is not installed is skipped, with that reason; any other import
error fails.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.metadata
import pkgutil
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def packages() -> list[str]:
    """The import root's packages that have a folder of their own (setuptools ``package-dir``)."""
    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"])


def modules(package: str) -> list[str]:
    """``package`` and every module under it, recursively."""
    path = importlib.import_module(package).__path__
    return [package, *(m.name for m in pkgutil.walk_packages(path, package + "."))]


def gpu_only() -> set[str]:
    """Import names of the ``gpu`` extra's requirements (verl, vllm, torch)."""
    requires = importlib.metadata.requires("voltbus") or []
    names = [re.match(r"[A-Za-z0-9_.-]+", r)[0] for r in requires if re.search(r"extra\s*==\s*['\"]gpu['\"]", r)]  # type: ignore[index]
    return {n.lower().replace("-", "_") for n in names}


MODULES = sorted({m for p in packages() for m in modules(p) if not m.endswith("__main__")})


def test_every_package_of_the_import_root_is_searched() -> None:
    assert {"voltbus.schemas", "voltbus.services", "voltbus.projections", "voltbus.store"} <= set(MODULES)


def test_only_the_gpu_extras_packages_excuse_an_import_error() -> None:
    assert {"verl", "vllm"} <= gpu_only()
    assert not {"msgspec", "nats", "duckdb", "voltbus"} & gpu_only()


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in gpu_only():
            pytest.skip(f"needs {e.name}, of the gpu extra")
        raise
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctests failed in {name}"
