"""Snapshots of the coordinator's fold in the bus (object store ``<ns>-snapshots``), so a start reads the latest
one and folds only the control events after it. A snapshot is a cache: it names the control sequence it was
folded to and a digest of the message stored there, and one that does not match the log is refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import re
import time
import zlib

import msgspec
import msgspec.inspect
import nats.errors
import nats.js.errors
from nats.js.api import ObjectStoreConfig, StorageType

from voltbus.services.clients.store import Store
from voltbus.services.lifecycle import RolloutState

from .tracker import Tracker
from .watchdog import Claim, WorkerLife

log = logging.getLogger(__name__)

FORMAT = 1
"""Snapshot format; bump it when the fold (the lifecycle's evolve, the tracker's rules) changes meaning."""
OBJECT = "coordinator"
"""The snapshot's name in the bucket: one object, replaced by each write (last writer wins)."""
FAILURES = (
    nats.errors.Error,
    nats.js.errors.Error,
    TimeoutError,
    OSError,
    zlib.error,
    msgspec.DecodeError,
    msgspec.ValidationError,
)
"""What reading or writing a snapshot may raise: the snapshot is skipped, never the coordinator."""


class Snapshot(msgspec.Struct, kw_only=True):
    """The tracker's fold of the control stream up to ``seq``: unfinished rollouts, claims, workers."""

    format: int
    """``FORMAT`` of the writer."""
    schema: str
    """``SCHEMA`` of the writer: a snapshot of another shape is refused."""
    stream: str
    """The control stream it was folded from."""
    seq: int
    """Last control sequence folded."""
    mark: str
    """sha256 of the message stored at ``seq`` (subject, message id, payload): ties the snapshot to this log."""
    taken_at: float
    """Writer's clock when it was taken (for logs only)."""
    rollouts: list[RolloutState]
    """Every unfinished rollout."""
    claims: list[tuple[str, str, int, float]]
    """(rollout id, attempt id, claim seq, claim time) of their attempts."""
    workers: dict[str, WorkerLife]
    """Each worker's liveness."""


def shape_digest(kind: type) -> str:
    """A digest of a struct's shape: every field's name, type and default, nested structs included."""
    shape = re.sub(r" at 0x[0-9a-f]+", "", repr(msgspec.inspect.type_info(kind)))  # no object addresses
    return hashlib.sha256(shape.encode()).hexdigest()[:16]


SCHEMA = shape_digest(Snapshot)
"""This version's snapshot shape."""


def capture(tracker: Tracker, stream: str, seq: int, mark: str) -> Snapshot:
    """The tracker's state as a snapshot at ``seq`` (``last_seen`` is not kept: the spans catch-up rebuilds it)."""
    claims = [(r, a, c.seq, c.time) for (r, a), c in tracker.claims.items()]
    rollouts = list(tracker.rollouts.values())
    return Snapshot(format=FORMAT, schema=SCHEMA, stream=stream, seq=seq, mark=mark, taken_at=time.time(),
                    rollouts=rollouts, claims=claims, workers=dict(tracker.workers))  # fmt: skip


def restore(tracker: Tracker, snap: Snapshot) -> None:
    """Put a snapshot's state into an empty tracker."""
    tracker.rollouts = {state.rollout_id: state for state in snap.rollouts}
    tracker.claims = {(r, a): Claim(seq, at) for r, a, seq, at in snap.claims}
    tracker.workers = dict(snap.workers)


def encode(snap: Snapshot) -> bytes:
    """Compressed JSON (task inputs are kept as raw JSON)."""
    return zlib.compress(msgspec.json.encode(snap), 1)


def decode(data: bytes) -> Snapshot:
    """The snapshot in ``data``; msgspec or zlib errors for anything else."""
    return msgspec.json.decode(zlib.decompress(data), type=Snapshot)


async def mark_at(store: Store, seq: int) -> str | None:
    """The digest of the control message stored at ``seq``, or None if the stream holds none there."""
    try:
        msg = await store.log.js.get_msg(store.topology.control_stream, seq=seq)
    except nats.js.errors.NotFoundError:
        return None
    digest = hashlib.sha256((msg.subject or "").encode())
    digest.update(b"\0" + ((msg.headers or {}).get("Nats-Msg-Id") or "").encode() + b"\0")
    digest.update(msg.data or b"")
    return digest.hexdigest()


def refusal(snap: Snapshot, stream: str, last_seq: int, mark: str | None) -> str | None:
    """Why a snapshot does not belong to this log and code (None: it does)."""
    if snap.format != FORMAT or snap.schema != SCHEMA:
        return f"it was written in format {snap.format}/{snap.schema}, this coordinator reads {FORMAT}/{SCHEMA}"
    if snap.stream != stream:
        return f"it was folded from stream {snap.stream}, not {stream}"
    if snap.seq > last_seq:
        return f"its sequence {snap.seq} is past the stream's last sequence {last_seq} (a restored or another log)"
    if mark != snap.mark:
        return f"the message at sequence {snap.seq} is not the one it was folded to (a restored or another log)"
    return None


async def fetch(store: Store, tries: int = 2) -> bytes:
    """The latest snapshot's bytes. A read that loses a race with another coordinator's write (the chunks it read of
    were replaced: a digest mismatch, or nothing left to read) is made again on the new snapshot."""
    bucket = await store.log.js.object_store(store.topology.snapshots_bucket)
    for attempt in range(tries):
        info, buffer = await bucket.get_info(OBJECT), io.BytesIO()
        try:
            async with asyncio.timeout(10 + (info.size or 0) / 5e6):  # chunks purged under us: never wait forever
                await bucket.get(OBJECT, writeinto=buffer)
            return buffer.getvalue()
        except (TimeoutError, nats.js.errors.DigestMismatchError):
            if attempt == tries - 1 or (await bucket.get_info(OBJECT)).nuid == info.nuid:
                raise
    raise AssertionError("unreachable")


async def load(store: Store, tracker: Tracker) -> int:
    """Fill an empty tracker from the latest snapshot that belongs to this log; return its sequence (0: none)."""
    topo = store.topology
    try:
        snap = decode(await fetch(store))
        last_seq = (await store.log.js.stream_info(topo.control_stream)).state.last_seq
        why = refusal(snap, topo.control_stream, last_seq, await mark_at(store, snap.seq) if snap.seq else None)
    except nats.js.errors.NotFoundError:  # no bucket, no object (or no control stream yet)
        log.info("no coordinator snapshot in %s: folding the control stream from its start", topo.snapshots_bucket)
        return 0
    except FAILURES as exc:
        log.warning("coordinator snapshot unreadable (%r): folding the control stream from its start", exc)
        return 0
    if why:
        log.warning(
            "coordinator snapshot at seq %d refused: %s; folding the control stream from its start", snap.seq, why
        )
        return 0
    restore(tracker, snap)
    log.info("coordinator snapshot at control seq %d: %d rollouts unfinished", snap.seq, len(snap.rollouts))
    return snap.seq


async def save(store: Store, tracker: Tracker, seq: int, max_bytes: int, replicas: int = 1) -> int | None:
    """Write the tracker's state, folded to ``seq``, as the latest snapshot; return its size (None: not written)."""
    topo = store.topology
    snap = capture(tracker, topo.control_stream, seq, "")  # copies taken with no await between: one fold's state
    mark = await mark_at(store, seq)
    if mark is None:
        log.warning("coordinator snapshot at seq %d not written: the control stream holds no message there", seq)
        return None
    snap.mark = mark
    body = await asyncio.to_thread(encode, snap)
    if len(body) > max_bytes:
        log.warning("coordinator snapshot at seq %d not written: %d bytes > coordinator.snapshot_max_bytes %d "
                    "(%d rollouts unfinished)", seq, len(body), max_bytes, len(snap.rollouts))  # fmt: skip
        return None
    try:
        bucket = await store.log.js.object_store(topo.snapshots_bucket)
    except nats.js.errors.BucketNotFoundError:
        config = ObjectStoreConfig(description="voltbus coordinator snapshots (a cache of its fold of the log)",
                                   storage=StorageType.FILE, replicas=replicas)  # fmt: skip
        bucket = await store.log.js.create_object_store(topo.snapshots_bucket, config)
    await bucket.put(OBJECT, body)
    return len(body)


async def snapshots(store: Store, tracker: Tracker, position: list[int], every: float, max_bytes: int,
                    written: list[int], replicas: int = 1) -> None:  # fmt: skip
    """Write a snapshot at once if the start folded events past the last one (a long catch-up is not paid twice),
    then every ``every`` seconds if the control reader moved since the last one (``written``)."""
    while True:
        await snapshot_now(store, tracker, position[0], max_bytes, written, replicas)
        await asyncio.sleep(every)


async def snapshot_now(store: Store, tracker: Tracker, seq: int, max_bytes: int, written: list[int],
                       replicas: int = 1) -> None:  # fmt: skip
    """Write a snapshot at ``seq`` unless the last one written is there already; failures are logged, not raised."""
    if seq <= written[0]:
        return
    started = time.monotonic()
    try:
        size = await save(store, tracker, seq, max_bytes, replicas)
    except FAILURES as exc:
        log.warning("coordinator snapshot at seq %d not written: %r", seq, exc)
        return
    if size is not None:
        written[0] = seq
        log.info("coordinator snapshot at control seq %d: %d rollouts, %d bytes in %.2fs",
                 seq, len(tracker.rollouts), size, time.monotonic() - started)  # fmt: skip
