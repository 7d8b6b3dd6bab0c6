"""Golden encoded samples of every released event shape stay decodable, to an equal event, forever."""

from __future__ import annotations

import pathlib

import msgspec
import pytest

from voltbus.schemas import EVENT_TYPES, decode_any, encode

from .samples import SAMPLES

GOLDEN = pathlib.Path(__file__).parent / "golden"
FILES = sorted(GOLDEN.glob("v*/*.json"))


def test_every_event_type_has_a_golden_file() -> None:
    have = {path.stem for path in FILES}
    missing = sorted(cls.__name__ for cls in EVENT_TYPES if cls.__name__ not in have)
    assert missing == [], f"add golden/v<N>/<Tag>.json for {missing} (encode a sample, never edit it)"


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden_decodes(path: pathlib.Path) -> None:
    data = path.read_bytes()
    event = decode_any(data)
    assert type(event).__name__ == path.stem
    assert msgspec.json.decode(data)["type"] == path.stem
    assert decode_any(encode(event)) == event


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("v1/*.json")), ids=lambda p: p.stem)
def test_golden_v1_equals_its_sample(path: pathlib.Path) -> None:
    assert decode_any(path.read_bytes()) == SAMPLES[path.stem]
