"""One training run on the bus: its history, its batches, its data, its step events.

Every algorithm (GRPO, APO, baseline) drives a run through this object, so what a run did is in the
log: ``RunStarted``, then per step ``StepStarted`` (the version sampled with, the batch's
rollouts), ``CheckpointSaved`` and ``StepCompleted`` (metrics, the version published), and
``RunFinished``. Opening a run that already exists reads that history back: a restarted learner
continues after the last completed step and, if it died inside a step, waits for that step's batch
instead of enqueueing another. Training rows are read by SQL from the projector's endpoint,
after it has applied everything the batch wrote (``min_seq``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec
import pyarrow as pa

from voltbus.schemas import derive_id
from voltbus.schemas.errors import VoltbusError
from voltbus.schemas.training import CheckpointSaved, RunFinished, RunStarted, StepCompleted, StepStarted
from voltbus.services.clients.store import EnqueueRolloutRequest, Rollout, Store
from voltbus.services.eventlog import Envelope
from voltbus.services.settings import ProjectorSettings

log = logging.getLogger(__name__)


class LearnerError(VoltbusError):
    """The learner cannot go on (no projector, a batch that never finished, a run already finished)."""


@dataclass
class History:
    """What the log says a run has done so far."""

    started: bool = False
    finished: str | None = None
    completed: dict[int, StepCompleted] = field(default_factory=dict)
    begun: dict[int, StepStarted] = field(default_factory=dict)
    checkpoints: dict[int, CheckpointSaved] = field(default_factory=dict)

    @property
    def next_step(self) -> int:
        """The first step not completed."""
        return max(self.completed, default=-1) + 1

    def open_batch(self, step: int) -> StepStarted | None:
        """The batch of ``step`` if it was begun but not completed (a restart inside that step)."""
        return self.begun.get(step) if step not in self.completed else None


class Session:
    """A run's link to the bus and the projector."""

    def __init__(self, store: Store, run_id: str, projector: ProjectorSettings) -> None:
        self.store, self.run_id = store, run_id
        self.sql_url = projector.url.rstrip("/") + "/sql"
        self.sql_headers = projector.auth_headers
        self.subject = store.topology.run(run_id)
        self.http = httpx.AsyncClient(timeout=None)  # one client: each new one costs ~50 ms of CPU

    async def close(self) -> None:
        """Close the HTTP client."""
        await self.http.aclose()

    async def history(self) -> History:
        """The run's events read back from the log."""
        found = History()
        stored, _ = await self.store.log.read_subject(self.subject)
        for item in stored:
            event = item.event if isinstance(item, Envelope) else None
            match event:
                case RunStarted():
                    found.started = True
                case StepStarted():
                    found.begun[event.step] = event
                case StepCompleted():
                    found.completed[event.step] = event
                case CheckpointSaved():
                    found.checkpoints[event.step] = event
                case RunFinished():
                    found.finished = event.status
        return found

    async def open(self, algorithm: str, config: dict[str, Any]) -> History:
        """Start the run, or read back how far it got; refuses a run that already finished."""
        found = await self.history()
        if found.finished is not None:
            raise LearnerError(f"run {self.run_id} already {found.finished}; start a new run id")
        if not found.started:
            raw = msgspec.Raw(msgspec.json.encode(config))
            event = RunStarted(
                event_id=derive_id(self.run_id), run_id=self.run_id, algorithm=algorithm, config=raw, at=time.time()
            )
            await self.store.log.append([event])
        return found

    async def begin_step(
        self, step: int, resources_id: str | None, requests: Sequence[EnqueueRolloutRequest]
    ) -> StepStarted:
        """Enqueue the step's batch and record which rollouts it is."""
        rollouts = await self.store.enqueue_many_rollouts(list(requests))
        event = StepStarted(
            event_id=derive_id(self.run_id, "started", step),
            run_id=self.run_id,
            step=step,
            resources_id=resources_id,
            rollout_ids=[r.rollout_id for r in rollouts],
            at=time.time(),
        )
        await self.store.log.append([event])
        return event

    async def wait(
        self, batch: StepStarted, timeout: float, say: Callable[[str], None] = log.warning, quiet_s: float = 30.0
    ) -> list[Rollout]:
        """The batch's rollouts once every one of them has ended; says so when no runner claimed any of them in
        the first ``quiet_s`` seconds."""
        ids, deadline = batch.rollout_ids, time.monotonic() + timeout
        done = await self.store.wait_for_rollouts(rollout_ids=ids, timeout=min(quiet_s, timeout))
        if len(done) < len(ids) and time.monotonic() < deadline:
            if not done and await self.none_claimed(ids):
                ns = self.store.topology.namespace
                say(
                    f"warning: no runner has claimed any of step {batch.step}'s {len(ids)} rollouts in {quiet_s:g}s: "
                    f"is a runner attached to namespace {ns} (`voltbus runner --agent ...`)? "
                    f"waiting up to {timeout:.0f}s (learner.rollout_timeout_s)"
                )
            done = await self.store.wait_for_rollouts(rollout_ids=ids, timeout=max(deadline - time.monotonic(), 0))
        if len(done) < len(batch.rollout_ids):
            raise LearnerError(
                f"step {batch.step}: {len(batch.rollout_ids) - len(done)} of {len(batch.rollout_ids)} rollouts "
                f"not finished after {timeout:.0f}s (are runners, the gateway and an inference server up?)"
            )
        return done

    async def none_claimed(self, rollout_ids: Sequence[str]) -> bool:
        """Whether every one of these rollouts still waits in the queue (no attempt was ever claimed)."""
        for rid in rollout_ids:
            rollout = await self.store.get_rollout_by_id(rid)
            if rollout is None or rollout.status != "queuing":
                return False
        return True

    async def query(self, sql: str, params: dict[str, Any] | None = None, timeout: float = 60.0) -> pa.Table:
        """Rows of a read-only query, once the projection has applied everything in the log now."""
        ends = {stream: await self.store.log.feed(stream).last_seq() for stream in ("control", "spans")}
        body = {"sql": sql, "params": params or {}, "min_seq": ends, "timeout": timeout}
        deadline = time.monotonic() + timeout
        while True:  # a projector restarting (crash, deploy) is waited for, up to the query's timeout
            try:
                response = await self.http.post(self.sql_url, json=body, headers=self.sql_headers, timeout=timeout + 10)
                break
            except httpx.TransportError as exc:
                if time.monotonic() > deadline:
                    hint = "start `voltbus projector`"
                    raise LearnerError(f"no projector answers at {self.sql_url} ({exc}): {hint}") from None
                log.warning("learner: no projector answers at %s (%s); retrying", self.sql_url, exc)
                await asyncio.sleep(0.5)
        if response.status_code != 200:
            raise LearnerError(f"projector refused the query ({response.status_code}): {response.text[:500]}")
        return pa.ipc.open_stream(response.content).read_all()

    async def checkpoint(self, step: int, uri: str, sha256: str) -> None:
        """Record where the state after ``step`` is saved."""
        event = CheckpointSaved(
            event_id=derive_id(self.run_id, "checkpoint", step),
            run_id=self.run_id,
            step=step,
            uri=uri,
            sha256=sha256,
            at=time.time(),
        )
        await self.store.log.append([event])

    async def complete_step(self, step: int, metrics: dict[str, float], resources_id: str | None) -> None:
        """Record the step's metrics and the version it published."""
        clean = {k: float(v) for k, v in metrics.items() if v == v}  # NaN would not survive JSON
        event = StepCompleted(
            event_id=derive_id(self.run_id, "step", step),
            run_id=self.run_id,
            step=step,
            metrics=clean,
            resources_id=resources_id,
            at=time.time(),
        )
        await self.store.log.append([event])

    async def finish(self, status: str, reason: str | None = None) -> None:
        """Record how the run ended."""
        event = RunFinished(
            event_id=derive_id(self.run_id, "finished"),
            run_id=self.run_id,
            status=status,
            reason=reason,
            at=time.time(),  # type: ignore[arg-type]
        )
        await self.store.log.append([event])


def new_run_id() -> str:
    """A fresh run id."""
    return f"run-{uuid.uuid4().hex[:10]}"
