"""Every ``voltbus.schemas`` module's doctests pass."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest
import voltbus.schemas

MODULES = sorted(f"voltbus.schemas.{m.name}" for m in pkgutil.iter_modules(voltbus.schemas.__path__))


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctests failed in {name}"
