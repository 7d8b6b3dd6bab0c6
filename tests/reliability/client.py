"""A Jepsen-style client of the rollout lifecycle: it queues rollouts with its own ids and records
each outcome in the op log; afterwards it settles the unknown ones by retrying the same command."""

from __future__ import annotations

import asyncio
import time

import msgspec

from voltbus.schemas.commands import QueueRollout
from voltbus.schemas.rollouts import RolloutConfig
from voltbus.services.eventlog import EventLog
from voltbus.services.lifecycle import decider

from .checkers import encode_command
from .oplog import OpLog

RETRYING = RolloutConfig(
    timeout_seconds=60.0,
    unresponsive_seconds=3.0,
    max_attempts=5,
    retry_condition=["failed", "timeout", "unresponsive"],
)
"""Client rollouts survive a killed runner: its silent attempt is retried."""


def queue_command(name: str, i: int) -> QueueRollout:
    task = msgspec.Raw(msgspec.json.encode({"id": f"{i % 10}+{i % 7}", "a": i % 10, "b": i % 7}))
    return QueueRollout(rollout_id=f"{name}-{i}", input=task, mode="train", config=RETRYING, at=float(i))


def event_id(cmd: QueueRollout) -> str:
    """The id of the event this command appends (deterministic: it derives from the command)."""
    return decider.decide(cmd, decider.initial_state())[0].event_id


class Client:
    """Queues rollouts at a steady pace until stopped."""

    def __init__(self, log: EventLog, oplog: OpLog, name: str = "client") -> None:
        self.log, self.oplog, self.name = log, oplog, name
        self.sent: list[QueueRollout] = []
        self.acked: set[str] = set()
        self.unknown: list[QueueRollout] = []

    async def queue(self, cmd: QueueRollout, process: str) -> None:
        args = {"rollout_id": cmd.rollout_id, "event_id": event_id(cmd), "command": encode_command(cmd)}
        with self.oplog.record(process, "queue", **args) as op:
            async with asyncio.timeout(10):
                done = await self.log.transact(decider, cmd.rollout_id, cmd)
            op.result = done.seq
        if op.outcome == "ok":
            self.acked.add(event_id(cmd))
        elif op.outcome == "unknown":
            self.unknown.append(cmd)

    async def run(self, stop: asyncio.Event, every_s: float = 0.5) -> None:
        i = 0
        while not stop.is_set():
            cmd = queue_command(self.name, i)
            self.sent.append(cmd)
            began = time.monotonic()
            await self.queue(cmd, self.name)
            i += 1
            try:  # a steady pace: the client's own clock, not synchronization
                await asyncio.wait_for(stop.wait(), max(0.0, every_s - (time.monotonic() - began)))
            except TimeoutError:
                pass

    async def settle(self) -> None:
        """Retry every command whose outcome was unknown (the same command: at most one transition)."""
        pending, self.unknown = self.unknown, []
        for cmd in pending:
            await self.queue(cmd, f"{self.name}-retry")


class Telemetry:
    """Publishes a span, a model call and a reward at a steady pace, as a runner does (its role), recording
    each publish with its event ids; afterwards it settles the unknown ones by publishing them again."""

    def __init__(self, log: EventLog, oplog: OpLog, name: str = "telemetry") -> None:
        self.log, self.oplog, self.name = log, oplog, name
        self.acked: set[str] = set()
        self.unknown: list[list[object]] = []

    async def publish(self, events: list[object], process: str) -> None:
        ids = [e.event_id for e in events]  # type: ignore[attr-defined]
        with self.oplog.record(process, "publish_spans", event_ids=ids) as op:
            async with asyncio.timeout(10):
                await self.log.publish_spans(events)  # type: ignore[arg-type]
        if op.outcome == "ok":
            self.acked |= set(ids)
        elif op.outcome == "unknown":
            self.unknown.append(events)

    async def run(self, stop: asyncio.Event, every_s: float = 0.5) -> None:
        from tests.projections.workload import telemetry

        i = 0
        while not stop.is_set():
            began = time.monotonic()
            await self.publish(telemetry(f"{self.name}-{i % 10}", "a1", i), self.name)  # type: ignore[arg-type]
            i += 1
            try:  # a steady pace: the client's own clock, not synchronization
                await asyncio.wait_for(stop.wait(), max(0.0, every_s - (time.monotonic() - began)))
            except TimeoutError:
                pass

    async def settle(self) -> None:
        """Publish every batch whose outcome was unknown again (the same ids: stored at most once)."""
        pending, self.unknown = self.unknown, []
        for events in pending:
            await self.publish(events, f"{self.name}-retry")
