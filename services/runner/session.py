"""A runner's start on its worker ids: a new session on each, and the attempts its previous process left settled.

Runs before the first claim, so a restarted runner never leaves an attempt it no longer runs ``running``. The
attempts a worker's last report names end ``unresponsive`` here; the ones it claimed too recently to be named
(``busy_report_s``) are ended by the coordinator, which sees the new session follow their claim in the log.
"""

from __future__ import annotations

import asyncio
import logging

from voltbus.schemas.errors import InvalidCommand, PermissionDenied
from voltbus.services.clients.store import Store
from voltbus.services.clients.store.base import new_id
from voltbus.services.lifecycle.state import ACTIVE_ATTEMPT

from .heartbeat import host_stats

log = logging.getLogger(__name__)


async def open_sessions(store: Store, worker_ids: list[str]) -> list[tuple[str, str]]:
    """End what the previous holders of the worker ids still ran, then open this process's session on each;
    return the (rollout id, attempt id) pairs ended here."""
    previous = await asyncio.gather(*(store.get_worker_by_id(w) for w in worker_ids))
    settled = []
    for worker in previous:
        if worker and worker.current_rollout_id and worker.current_attempt_id:
            pair = (worker.current_rollout_id, worker.current_attempt_id)
            if await settle(store, worker.worker_id, *pair):
                settled.append(pair)
    session, stats = new_id("ws", 8), host_stats()
    await asyncio.gather(*(store.start_worker_session(w, session, stats) for w in worker_ids))
    return settled


async def settle(store: Store, worker_id: str, rollout_id: str, attempt_id: str) -> bool:
    """End the attempt ``unresponsive`` (retried per its rollout's config) if ``worker_id`` still holds it in
    progress: the process that ran it is gone. False when it had ended already."""
    try:
        latest = await store.get_latest_attempt(rollout_id)
        held = latest is not None and latest.attempt_id == attempt_id and latest.worker_id == worker_id
        if not held or latest.status not in ACTIVE_ATTEMPT:  # type: ignore[union-attr]
            return False
        state = await store.expire_attempt(rollout_id, attempt_id, "unresponsive")
    except InvalidCommand as exc:  # gone or ended meanwhile (the coordinator may have got there first)
        log.info("rollout_id=%s attempt_id=%s: nothing to settle (%s)", rollout_id, attempt_id, exc)
        return False
    except PermissionDenied:  # a bus with users: ends by authority are the coordinator's (docs/security.md)
        log.info("rollout_id=%s attempt_id=%s: left to the coordinator to end", rollout_id, attempt_id)
        return False
    log.warning(
        "rollout_id=%s attempt_id=%s: worker %s restarted while it ran; ended unresponsive (rollout %s)",
        rollout_id,
        attempt_id,
        worker_id,
        state.status,
    )
    return True
