"""The committed JSON Schemas in ``schemas/json/`` match the Structs exactly."""

from __future__ import annotations

import pathlib

import voltbus.schemas as schemas
from voltbus.schemas import EVENT_TYPES, json_schemas

JSON_DIR = pathlib.Path(schemas.__file__).parent / "json"
HINT = "schemas/json is out of date: run `voltbus schemas export`"


def test_one_schema_per_event_type() -> None:
    assert sorted(json_schemas()) == sorted(f"{cls.__name__}.json" for cls in EVENT_TYPES)


def test_files_on_disk_match() -> None:
    expected = json_schemas()
    on_disk = {path.name: path.read_bytes() for path in JSON_DIR.glob("*.json")}
    assert sorted(on_disk) == sorted(expected), HINT
    stale = sorted(name for name, data in expected.items() if on_disk[name] != data)
    assert stale == [], f"{HINT} ({', '.join(stale)} differ)"


def test_schemas_are_deterministic() -> None:
    assert json_schemas() == json_schemas()
