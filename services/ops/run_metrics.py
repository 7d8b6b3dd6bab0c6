"""``voltbus metrics``: a consumer of one run's events (its subject of the control stream) that writes the run's
config and every step's metrics to TensorBoard, MLflow or Weights & Biases (``metric_sinks``). A past run is
replayed from the log; ``follow`` then waits for new steps until the run finishes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import msgspec
from nats.js.errors import NotFoundError

from voltbus.schemas.errors import InvalidCommand
from voltbus.schemas.subjects import check_token
from voltbus.schemas.training import RunFinished, RunStarted, StepCompleted
from voltbus.services.eventlog import BadEvent, Envelope, EventLog, connect
from voltbus.services.settings import Settings

from .metric_sinks import Sink

Record = Envelope | BadEvent


@dataclass
class Exported:
    """What the consumer wrote of a run so far."""

    run_id: str
    started: bool = False
    steps: list[int] = field(default_factory=list)
    """Steps written, in the order read."""
    repeated: int = 0
    """Steps completed again (a resumed run): the first record of a step is the one written."""
    undecodable: int = 0
    """Messages on the run's subject that did not decode (skipped; the projector quarantines them too)."""
    finished: str | None = None
    """How the run ended, once its ``RunFinished`` was read."""
    last_seq: int = 0
    """Control stream sequence of the last message read."""

    def line(self) -> str:
        """One line for people: what was written and what was left out."""
        ended = f"run {self.finished}" if self.finished else "run not finished"
        extra = f", {self.repeated} repeated steps skipped" if self.repeated else ""
        bad = f", {self.undecodable} undecodable events skipped" if self.undecodable else ""
        return f"{len(self.steps)} steps of run {self.run_id} written ({ended}{extra}{bad})"


def plan(state: Exported, record: Record) -> list[tuple[str, tuple[object, ...]]]:
    """The sink calls (method name, arguments) that ``record`` asks for, and ``state`` moved past it; pure.

    >>> s = Exported("r")
    >>> ran = RunStarted(event_id="e0", run_id="r", algorithm="grpo", config=msgspec.Raw(b'{"lr": 0.1}'), at=1.0)
    >>> plan(s, Envelope(seq=1, subject="vb.run.r", time=1.0, event=ran))
    [('start', ('grpo', {'lr': 0.1}, 1.0))]
    >>> done = StepCompleted(event_id="e1", run_id="r", step=0, metrics={"reward_mean": 0.5}, at=2.0)
    >>> plan(s, Envelope(seq=2, subject="vb.run.r", time=2.0, event=done)), plan(s, Envelope(seq=3, subject="vb.run.r",
    ...     time=3.0, event=done)), s.repeated
    ([('step', (0, {'reward_mean': 0.5}, 2.0))], [], 1)
    """
    state.last_seq = record.seq
    if isinstance(record, BadEvent):
        state.undecodable += 1
        return []
    calls: list[tuple[str, tuple[object, ...]]] = []
    event, first = record.event, not state.started
    state.started = True
    if first and not isinstance(event, RunStarted):  # its start was not found: written without its config
        calls.append(("start", ("unknown", {}, record.time)))
    match event:
        case RunStarted(algorithm=algorithm, config=config, at=at) if first:
            calls.append(("start", (algorithm, msgspec.json.decode(config), at)))
        case StepCompleted(step=step, metrics=metrics, at=at) if step not in state.steps:
            state.steps.append(step)
            calls.append(("step", (step, dict(metrics), at)))
        case StepCompleted():
            state.repeated += 1
        case RunFinished(status=status, reason=reason):
            state.finished = status
            calls.append(("finish", (status, reason)))
    return calls


async def _apply(state: Exported, record: Record, sink: Sink) -> None:
    for method, args in plan(state, record):
        await asyncio.to_thread(getattr(sink, method), *args)  # the writers block (files, a W&B service)


async def export_run(
    settings: Settings,
    run_id: str,
    open_sink: Callable[[], Sink],
    follow: bool = False,
    say: Callable[[str], None] = lambda _: None,
) -> Exported:
    """Write run ``run_id``'s stored events to the sink ``open_sink`` makes; with ``follow``, then each new one
    until the run finishes. InvalidCommand when the bus has no event of that run."""
    # It only reads (direct gets, an ephemeral ordered consumer): no stream is declared, so a read-only bus user
    # (the dashboard's) can run it.
    check_token("run id", run_id)
    log = EventLog(await connect(settings.nats, "voltbus-metrics"), settings.nats)
    state, sink = Exported(run_id), None
    try:
        await _check_log(log, settings)
        subject = log.topology.run(run_id)
        records, _ = await log.read_subject(subject)
        if not records:
            raise InvalidCommand(
                f"no run {run_id!r} on the bus at {settings.nats.url} (namespace {settings.nats.namespace}): "
                "its events would be on subject " + subject
            )
        sink = await asyncio.to_thread(open_sink)
        for record in records:
            await _apply(state, record, sink)
        say(f"{state.line()}; {'waiting for more' if follow and not state.finished else 'done'}")
        if follow and not state.finished:
            async for record in _after(log, subject, state.last_seq):
                await _apply(state, record, sink)
                if state.finished:
                    break
    finally:
        if sink is not None:
            await asyncio.to_thread(sink.close)
        await log.close()
    return state


async def _check_log(log: EventLog, settings: Settings) -> None:
    """InvalidCommand when the namespace has no control stream on this bus (a wrong URL or namespace)."""
    name = log.topology.control_stream
    try:
        await log.js.stream_info(name)
    except NotFoundError:
        raise InvalidCommand(
            f"no voltbus log in namespace {settings.nats.namespace} on the bus at {settings.nats.url} "
            f"(no stream {name}; check --nats-url and VOLTBUS_NATS__NAMESPACE)"
        ) from None


def _after(log: EventLog, subject: str, seq: int) -> AsyncIterator[Record]:
    """The run's events stored after ``seq``, then each new one as it arrives."""
    return log.replay("control", from_seq=seq + 1, follow=True, subject=subject)
