"""Every module's doctests pass: the contract, the services' plumbing and the CLI."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import voltbus
import voltbus.schemas
import voltbus.services


def modules(package: object) -> list[str]:
    """Every module under ``package``, recursively."""
    return [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]  # type: ignore[attr-defined]


MODULES = sorted(m for m in set(modules(voltbus.schemas) + modules(voltbus.services)) if not m.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctests failed in {name}"
