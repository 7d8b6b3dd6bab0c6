"""The coordinator's snapshots on a server that enforces the generated permissions: the coordinator writes and
reads its own, and no other role can write, replace, purge or remove one (a forged snapshot is refused by the
server, and the coordinator's stays the latest)."""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats
import pytest

from voltbus.schemas.rollouts import RolloutQueued
from voltbus.services.coordinator import snapshot
from voltbus.services.coordinator.handlers import catch_up
from voltbus.services.coordinator.tracker import Tracker
from voltbus.services.eventlog import EventLog
from voltbus.services.ops.natsserver import NatsServer
from voltbus.store import Store, connect

from .test_bus_permissions import NS, auth_dir, raw_client, role_settings, secured_server, violations  # noqa: F401

BUCKET = f"{NS}-snapshots"
META = f"$O.{BUCKET}.M.{base64.urlsafe_b64encode(snapshot.OBJECT.encode()).decode()}"
OTHERS = ["runner", "learner", "gateway", "storeserver", "projector", "dashboard", "inference"]


@pytest.fixture
async def genuine(secured_server: NatsServer, auth_dir: Path) -> AsyncIterator[int]:  # noqa: F811
    """Three more queued rollouts and the coordinator's snapshot of the log, written with its own user."""
    admin = await EventLog.connect(role_settings(secured_server, auth_dir, "admin"))
    ids = [f"snap-{uuid.uuid4().hex[:12]}" for _ in range(3)]
    for rid in ids:
        await admin.append([RolloutQueued(event_id=f"q-{rid}", rollout_id=rid, input=msgspec.Raw(b"1"),
                                          queued_at=time.time())])  # fmt: skip
    await admin.close()
    before = len(violations(secured_server))
    store = await connect(settings=role_settings(secured_server, auth_dir, "coordinator"))
    try:
        tracker = Tracker()
        at = await catch_up(store, tracker)
        assert await snapshot.save(store, tracker, at, max_bytes=1 << 30)
        resumed = Tracker()
        assert await snapshot.load(store, resumed) == at
        assert set(ids) <= set(resumed.rollouts) and resumed.rollouts == tracker.rollouts
    finally:
        await store.close()
    assert violations(secured_server, before) == []
    yield at


async def latest(server: NatsServer, auth_dir: Path) -> snapshot.Snapshot:  # noqa: F811
    """The snapshot the coordinator would load, read by the coordinator's user."""
    store: Store = await connect(settings=role_settings(server, auth_dir, "coordinator"))
    try:
        return snapshot.decode(await snapshot.fetch(store))
    finally:
        await store.close()


async def test_the_coordinator_writes_and_reads_its_snapshot_with_its_own_user(genuine: int) -> None:
    assert genuine > 0


@pytest.mark.parametrize("role", OTHERS)
async def test_no_other_role_can_forge_replace_or_remove_the_snapshot(
    secured_server: NatsServer,  # noqa: F811
    auth_dir: Path,  # noqa: F811
    genuine: int,
    role: str,
) -> None:
    real = await latest(secured_server, auth_dir)
    # a forgery that would pass the log check (the right seq and mark, both readable by most roles) and
    # hides every unfinished rollout from the coordinator's watch
    forged = snapshot.encode(msgspec.structs.replace(real, rollouts=[], claims=[], workers={}))
    info = {"name": snapshot.OBJECT, "bucket": BUCKET, "nuid": "forged", "size": len(forged), "chunks": 1,
            "digest": "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(forged).digest()).decode()}  # fmt: skip
    errors: list[str] = []
    nc = await raw_client(secured_server, auth_dir, role, errors)
    js = nc.jetstream(timeout=0.5)
    writes = [
        (f"$O.{BUCKET}.C.forged", forged),
        (META, msgspec.json.encode(info)),
        (f"$JS.API.STREAM.PURGE.OBJ_{BUCKET}", b"{}"),
        (f"$JS.API.STREAM.DELETE.OBJ_{BUCKET}", b""),
        (f"$JS.API.STREAM.UPDATE.OBJ_{BUCKET}", b"{}"),
    ]
    try:
        for subject, body in writes:
            with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
                if subject.startswith("$O."):
                    await js.publish(subject, body, headers={"Nats-Rollup": "sub"})
                else:
                    await nc.request(subject, body, timeout=0.5)
    finally:
        await nc.close()
    for subject, _ in writes:
        assert any(f'permissions violation for publish to "{subject.lower()}"' in e for e in errors), (role, subject)
    after = await latest(secured_server, auth_dir)
    assert (after.seq, after.mark, after.rollouts) == (genuine, real.mark, real.rollouts) and real.rollouts
