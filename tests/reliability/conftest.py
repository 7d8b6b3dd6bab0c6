"""Every test in this folder carries the ``reliability`` marker (excluded from the default run); ``bus`` is
an authenticated nats-server of the test's own (a user per role, as ``voltbus up`` makes them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .system import System

HERE = Path(__file__).parent


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[System]:
    """A system with only its bus started: clients connect with ``bus.client(role)``."""
    system = System(tmp_path / "bus")
    system.start_bus()
    yield system
    system.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.reliability)
