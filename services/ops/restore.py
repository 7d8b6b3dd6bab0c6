"""Restoring a backup (see ``backup.py``): check every file, refuse to overwrite history, rebuild the
streams from their snapshots and check that each came back with the state it was saved with.

Everything that can be checked is checked before the first write: the manifest's format and
namespace, every file's size and sha256, and that no stream to restore holds messages (an empty
one, as ``voltbus streams`` or a starting service creates, is replaced; a non-empty one only with
``force``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import nats.errors
from nats.aio.client import Client

from voltbus.schemas.subjects import Topology
from voltbus.services.progress import Meter, Say

from .backup import CHUNK, FORMAT, MANIFEST, BackupError, _api, list_streams


def read_manifest(source: Path) -> dict[str, object]:
    """The manifest of the backup in ``source``, or a BackupError saying why there is none."""
    path = source / MANIFEST
    if not path.is_file():
        raise BackupError(f"no backup in {source} ({MANIFEST} is missing: an unfinished or foreign directory)")
    try:
        manifest = json.loads(path.read_text())
    except ValueError as exc:
        raise BackupError(f"{path} is not valid JSON: {exc}") from None
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{path}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest


def verify(source: Path, manifest: dict[str, object]) -> None:
    """Check every snapshot file's size and sha256 against the manifest."""
    for entry in manifest["streams"]:  # type: ignore[attr-defined]
        path = source / entry["file"]
        if not path.is_file():
            raise BackupError(f"backup file {path} is missing")
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        if path.stat().st_size != entry["bytes"] or digest.hexdigest() != entry["sha256"]:
            raise BackupError(
                f"backup file {path} is corrupt: sha256 {digest.hexdigest()[:16]}..., "
                f"{path.stat().st_size} bytes; the manifest says {entry['sha256'][:16]}..., {entry['bytes']} bytes"
            )


def placed(config: dict[str, object], replicas: int | None) -> dict[str, object]:
    """A stream's saved config with ``replicas`` copies (None or 1: as saved). A replicated stream cannot
    persist asynchronously, so the spans stream's ``persist_mode`` goes with more than one copy.

    >>> placed({"name": "VB_SPANS", "num_replicas": 1, "persist_mode": "async"}, 3)
    {'name': 'VB_SPANS', 'num_replicas': 3}
    >>> placed({"name": "VB_SPANS", "num_replicas": 1, "persist_mode": "async"}, None)["persist_mode"]
    'async'
    """
    if not replicas or replicas == 1:
        return config
    return {**{k: v for k, v in config.items() if k != "persist_mode"}, "num_replicas": replicas}


async def _occupied(nc: Client, names: list[str], timeout: float) -> dict[str, int]:
    """Message counts of the streams among ``names`` that exist on the server."""
    existing = set(await list_streams(nc, timeout))
    counts = {}
    for name in names:
        if name in existing:
            info = await _api(nc, f"STREAM.INFO.{name}", None, timeout)
            counts[name] = int(info["state"]["messages"])  # type: ignore[index]
    return counts


async def _send(nc: Client, subject: str, chunk: bytes, timeout: float, tries: int = 50) -> None:
    """One restore chunk, sent again only when no one received it (the server may not yet listen on
    ``subject`` right after answering the restore request); a timeout is never retried (ambiguous)."""
    for attempt in range(tries):
        try:
            await nc.request(subject, chunk, timeout=timeout)
            return
        except nats.errors.NoRespondersError:
            await asyncio.sleep(min(0.01 * 2**attempt, 0.2))
    raise BackupError(f"restore: the server stopped listening on {subject}")


async def restore_stream(
    nc: Client, entry: dict[str, object], path: Path, meter: Meter, timeout: float, replicas: int | None = None
) -> None:
    """Rebuild one stream from its snapshot file (with ``replicas`` copies if given); check its state."""
    name = str(entry["name"])
    config = placed(entry["config"], replicas)  # type: ignore[arg-type]
    answer = await _api(nc, f"STREAM.RESTORE.{name}", {"config": config, "state": entry["state"]}, timeout)
    deliver = str(answer["deliver_subject"])
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            await _send(nc, deliver, chunk, timeout)
            meter.add(len(chunk))
    reply = await nc.request(deliver, b"", timeout=max(timeout, 120.0))  # the server unpacks it now
    done = json.loads(reply.data)
    if "error" in done:
        raise BackupError(f"restore of {name} failed: {done['error'].get('description', done['error'])}")
    saved, now = entry["state"], done["state"]
    for key in ("messages", "last_seq", "first_seq") if saved["messages"] else ("messages", "last_seq"):  # type: ignore[index]
        if saved[key] != now[key]:  # type: ignore[index]
            raise BackupError(f"restored {name} differs from its backup: {key} {now[key]} != {saved[key]}")  # type: ignore[index]


async def restore(
    nc: Client,
    topology: Topology,
    source: Path,
    say: Say,
    force: bool = False,
    timeout: float = 30.0,
    replicas: int | None = None,
) -> dict[str, object]:
    """Restore the backup in ``source`` into the server ``nc`` is connected to; return its manifest.

    ``replicas``: copies of every stream on a cluster (None: as the backup saved them)."""
    manifest = read_manifest(source)
    if manifest["namespace"] != topology.namespace:
        raise BackupError(
            f"the backup is of namespace {manifest['namespace']!r}, not {topology.namespace!r}: snapshots keep "
            f"their subjects, so restore with --namespace {manifest['namespace']} (or VOLTBUS_NATS__NAMESPACE)"
        )
    entries: list[dict[str, object]] = manifest["streams"]  # type: ignore[assignment]
    verify(source, manifest)
    occupied = await _occupied(nc, [str(e["name"]) for e in entries], timeout)
    full = {n: c for n, c in occupied.items() if c}
    if full and not force:
        held = ", ".join(f"{n} ({c:,} messages)" for n, c in sorted(full.items()))
        raise BackupError(f"refusing to restore over streams that hold messages: {held}; pass --force to replace them")
    for name in occupied:
        await _api(nc, f"STREAM.DELETE.{name}", None, timeout)
    meter = Meter("restore", sum(int(e["bytes"]) for e in entries), say, unit="MB", scale=1e6)  # type: ignore[call-overload]
    say(f"restore: {len(entries)} streams of namespace {topology.namespace!r} from {source}")
    for entry in entries:
        await restore_stream(nc, entry, source / str(entry["file"]), meter, timeout, replicas)
    messages = sum(int(e["state"]["messages"]) for e in entries)  # type: ignore[index]
    replaced = f", replaced {', '.join(sorted(occupied))}" if occupied else ""
    say(f"restored {len(entries)} streams, {messages:,} messages in {meter.elapsed():.1f}s{replaced}")
    return manifest
