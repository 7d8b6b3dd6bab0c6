"""``voltbus reproject``: the training tables rebuilt from the log with other adapter settings, into a new file.

Nothing runs again: the spans, model calls and rewards already in the log go through the adapter with
the new settings; every other table comes along as ``voltbus replay`` builds it.
"""

from __future__ import annotations

import asyncio
import tomllib
from collections.abc import Callable
from pathlib import Path

import msgspec

from voltbus.projections.adapter import AdapterSettings, parse_settings, settings_id
from voltbus.schemas.errors import InvalidCommand
from voltbus.services.projector.client import open_read_only, rebuild
from voltbus.services.settings import Settings

COUNTS = ", ".join(f"(SELECT count(*) FROM {t})" for t in ("training_attempts", "triplets", "trajectories"))


def load_settings(text: str) -> AdapterSettings:
    """Adapter settings from a JSON object, or from a ``.json`` / ``.toml`` file; unknown keys are refused.

    >>> load_settings('{"reward_policy": "per_call"}').reward_policy
    'per_call'
    >>> load_settings('{"reward_polcy": "per_call"}')
    Traceback (most recent call last):
    ...
    voltbus.schemas.errors.InvalidCommand: adapter settings: Object contains unknown field `reward_polcy`
    """
    try:
        if text.lstrip().startswith("{"):
            return parse_settings(text)
        path = Path(text)
        if not path.is_file():
            raise InvalidCommand(f"adapter settings: {text!r} is neither a JSON object nor a file")
        if path.suffix == ".toml":
            return msgspec.convert(tomllib.loads(path.read_text()), AdapterSettings)
        return parse_settings(path.read_bytes())
    except (msgspec.ValidationError, msgspec.DecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidCommand(f"adapter settings: {exc}") from None


def make_room(db: Path, force: bool) -> None:
    """Refuse an existing ``db`` unless ``force``; with it, delete the file (never one a projector holds)."""
    if not db.exists():
        return
    if not force:
        raise InvalidCommand(f"{db} already exists: reproject builds a new database (choose another path, or --force)")
    open_read_only(db).close()  # a file a running projector holds is refused here
    for path in (db, db.with_name(db.name + ".wal")):
        path.unlink(missing_ok=True)


async def reproject(
    settings: Settings, db: Path, adapter: AdapterSettings, say: Callable[[str], None]
) -> tuple[int, int, int]:
    """Rebuild ``db`` from the log with ``adapter``; return (attempts, triplets, trajectories)."""
    await rebuild(settings, db, say, adapter=adapter, label="reproject")
    with open_read_only(db, settings.projector.duckdb_memory_limit) as con:
        attempts, triplets, trajectories = con.execute("SELECT " + COUNTS).fetchone() or (0, 0, 0)
    say(
        f"reprojected {attempts:,} attempts into {triplets:,} triplets and {trajectories:,} trajectories "
        f"in {db} (settings_id {settings_id(adapter)}: {msgspec.json.encode(adapter).decode()})"
    )
    return attempts, triplets, trajectories


def reproject_sync(settings: Settings, db: Path, text: str, force: bool, say: Callable[[str], None]) -> None:
    """``reproject`` for the command line: settings parsed and the target checked before the bus is touched."""
    adapter = load_settings(text)
    make_room(db, force)
    asyncio.run(reproject(settings, db, adapter, say))
