"""The EventLog: the one object through which every service appends to and reads from the bus."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from pathlib import Path
from typing import Generic, Literal, Protocol, TypeVar

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy, Header
from nats.js.errors import NotFoundError

from voltbus.schemas import codec
from voltbus.schemas.codec import AnyEvent
from voltbus.schemas.errors import ConcurrencyConflict, PublishFailed, VoltbusError
from voltbus.schemas.spans import items_of
from voltbus.schemas.subjects import WHOLE_STREAM, Topology, aggregate_of, subject_for

from ..settings import NatsSettings
from . import objects
from .append import Expectation, Message, Writer
from .connection import connect, refusable, unsubscribe
from .feed import Feed
from .read import read_subject, stream_subjects, subjects_after
from .records import Appended, BadEvent, Envelope
from .replay import replay_stream
from .spans import batched, publish_pipelined
from .streams import ensure_streams, topology_of

log = logging.getLogger(__name__)

S = TypeVar("S")
C = TypeVar("C")

StreamName = Literal["control", "spans"]


class Transacted(msgspec.Struct, Generic[S], frozen=True, kw_only=True):
    """What ``transact`` did: the events appended and the state after them."""

    events: list[AnyEvent]
    state: S
    seq: int


class Decider(Protocol[S, C]):
    """A lifecycle as pure functions (a decider module satisfies this); ``fold`` is ``evolve`` for an event read
    from the log, whose subject says who could have written it."""

    def initial_state(self) -> S: ...
    def decide(self, command: C, state: S) -> list[AnyEvent]: ...
    def evolve(self, state: S, event: AnyEvent) -> S: ...
    def fold(self, state: S, event: AnyEvent, subject: str) -> S: ...
    def is_terminal(self, state: S) -> bool: ...


class EventLog:
    """Append with exactly-once guarantees, read an aggregate, replay a stream."""

    def __init__(self, nc: Client, settings: NatsSettings) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=settings.request_timeout_s, publish_async_max_pending=settings.span_window)
        self.settings = settings
        self.topology: Topology = topology_of(settings)
        timeout, retries = settings.request_timeout_s, settings.publish_retries
        self.control = Writer(nc, self.js, self.topology.control_stream, timeout, retries)
        self.written: dict[StreamName, int] = {"control": 0, "spans": 0}
        """Highest sequence this client appended per stream (readers wait for it: read-your-writes)."""
        self._replays: weakref.WeakSet[AsyncGenerator[Envelope | BadEvent, None]] = weakref.WeakSet()

    @classmethod
    async def connect(cls, settings: NatsSettings, name: str = "voltbus") -> EventLog:
        """Connect to the bus and make sure the streams exist."""
        log_ = cls(await connect(settings, name), settings)
        await log_.ensure_streams()
        return log_

    async def close(self) -> None:
        """End unfinished replays, flush and close the connection."""
        for replay in list(self._replays):
            with contextlib.suppress(RuntimeError):  # one still being iterated elsewhere ends with the connection
                await replay.aclose()
        await self.nc.drain()

    @property
    def weights_bucket(self) -> str:
        """The object store of this namespace's policy weights."""
        return f"{self.topology.namespace}-weights"

    async def put_weights(self, name: str, path: Path | bytes) -> str:
        """Store a weights file (or bytes: a packed checkpoint) in the bus (``nats-obj://<ns>-weights/<name>``);
        returns its reference."""
        s = self.settings
        return await objects.put_file(self.js, self.weights_bucket, name, path, s.replicas, s.publish_retries)

    async def fetch_weights(self, uri: str, cache: Path, sha256: str, suffix: str = ".safetensors") -> Path:
        """A local, digest-checked copy of weights (or a checkpoint) stored in the bus (fetched once per digest)."""
        return await objects.fetch_file(self.js, uri, cache, sha256, suffix)

    async def ensure_streams(self) -> list[str]:
        """Create the streams if needed; refuse incompatible existing ones."""
        return await ensure_streams(self.js, self.settings)

    def _message(self, event: AnyEvent) -> Message:
        return Message(subject_for(self.topology, event), codec.encode_checked(event), event.event_id)

    def _expectation(self, events: Sequence[AnyEvent], expected_seq: int | None) -> Expectation | None:
        if expected_seq is None:
            return None
        aggregate = aggregate_of(events[0])
        scope = self.topology.rollout_any(aggregate) if aggregate else subject_for(self.topology, events[0])
        return Expectation(scope, expected_seq)

    async def append(self, events: Sequence[AnyEvent], expected_seq: int | None = None) -> Appended:
        """Append control events of one aggregate exactly once (atomically when several).

        ``expected_seq`` is the aggregate's last sequence as the caller saw it (0: it must not exist
        yet); None appends without a concurrency check. Raises ConcurrencyConflict when another
        writer got there first, PublishFailed when the bus never acknowledged.
        """
        if not events:
            raise ValueError("append needs at least one event")
        aggregates = {aggregate_of(e) for e in events}
        if len(aggregates) > 1:
            raise ValueError(f"one append covers one aggregate, got {sorted(map(str, aggregates))}")
        ack = await self.control.append([self._message(e) for e in events], self._expectation(events, expected_seq))
        self.written["control"] = max(self.written["control"], ack.seq)
        return ack

    async def append_many(
        self, events: Sequence[AnyEvent], expected_seq: int | None = 0
    ) -> list[Appended | ConcurrencyConflict]:
        """Append many single-event aggregates (e.g. thousands of new rollouts) in a pipeline."""
        items = [(self._message(e), self._expectation([e], expected_seq)) for e in events]
        results = await self.control.append_many(items)
        seqs = [r.seq for r in results if isinstance(r, Appended)]
        self.written["control"] = max([self.written["control"], *seqs])
        return results

    async def publish_spans(self, events: Sequence[AnyEvent], batch: bool = False) -> None:
        """Publish span-stream events (spans, model calls, rewards, heartbeats); never drops silently.

        Each event is a message of its own, its id the message id: a retry of any of them is stored once. With
        ``batch``, those of one shard subject are stored as ``SpanBatch`` messages (``span_batch_bytes``): one
        publish, acknowledgement and delivery each. A batch's id is derived from its events, so only a retry with
        the very same events is stored once: for a caller that retries a failed publish with exactly what it
        published."""
        s = self.settings
        messages = [self._message(e) for e in events]
        if batch:
            messages = batched(messages, min(s.span_batch_bytes, s.max_payload // 2))
        last = await publish_pipelined(
            self.nc, self.js, messages, s.span_window, s.request_timeout_s, s.publish_retries
        )
        self.written["spans"] = max(self.written["spans"], last)

    async def next_sequence(self, rollout_id: str, count: int = 1) -> int:
        """Advance a rollout's span sequence counter by ``count``; return its new value (atomic)."""
        subject = self.topology.counter(rollout_id)
        headers = {Header.INCR: str(count)}
        try:
            publish = self.js.publish(subject, b"", timeout=self.settings.request_timeout_s, headers=headers)
            ack = await refusable(self.nc, [subject], [subject], publish)
        except (TimeoutError, nats.errors.Error) as exc:  # overshooting on a retry only leaves a gap in the ids
            raise PublishFailed([subject], f"span counter not advanced: {exc or type(exc).__name__}") from None
        return int(ack.val or 0)

    async def raise_sequence(self, rollout_id: str, at_least: int) -> int:
        """Make a rollout's span counter at least ``at_least`` (it may overshoot under concurrency; it
        never ends below); return its value."""
        subject = self.topology.counter(rollout_id)
        try:
            raw = await self.js.get_last_msg(self.topology.counters_stream, subject, direct=True)
            current = int(json.loads(raw.data or b"{}").get("val", 0))
        except NotFoundError:
            current = 0
        return current if current >= at_least else await self.next_sequence(rollout_id, at_least - current)

    async def read(self, rollout_id: str, after_seq: int = 0) -> tuple[list[Envelope | BadEvent], int]:
        """A rollout's events in order (undecodable ones as BadEvent) and its last sequence (0: none)."""
        scope = self.topology.rollout_any(rollout_id)
        stream, timeout = self.topology.control_stream, self.settings.request_timeout_s
        return await read_subject(self.nc, stream, scope, codec.decode_control, after_seq, timeout)

    async def read_subject(self, subject: str, after_seq: int = 0) -> tuple[list[Envelope | BadEvent], int]:
        """Events of any control subject (a resources bundle, a run, a worker) and its last sequence."""
        stream, timeout = self.topology.control_stream, self.settings.request_timeout_s
        return await read_subject(self.nc, stream, subject, codec.decode_control, after_seq, timeout)

    async def subjects(self, subjects_filter: str) -> dict[str, int]:
        """The control stream's subjects that match ``subjects_filter`` (narrow it: each is sent), with their counts."""
        stream, timeout = self.topology.control_stream, self.settings.request_timeout_s
        return await stream_subjects(self.nc, stream, subjects_filter, timeout)

    async def rollouts_after(self, after_seq: int, at_most: int) -> set[str] | None:
        """The rollouts with a control message after ``after_seq``, read from the messages' subjects alone; None when
        there are more than ``at_most`` such messages."""
        stream, timeout = self.topology.control_stream, self.settings.request_timeout_s
        subjects = await subjects_after(self.nc, stream, self.topology.every_rollout, after_seq, at_most, timeout)
        return None if subjects is None else {s.split(".")[2] for s in subjects}

    async def head(self, rollout_id: str) -> int:
        """The last sequence of a rollout (0 when it does not exist)."""
        return await self.control.head(self.topology.rollout_any(rollout_id))

    async def load(self, decider: Decider[S, C], rollout_id: str) -> tuple[S, int]:
        """A rollout's state folded from its events, and its last sequence (0: it does not exist)."""
        envelopes, last = await self.read(rollout_id)
        state = decider.initial_state()
        for env in envelopes:
            if isinstance(env, BadEvent):
                log.warning("rollout_id=%s: skipping undecodable event at seq %d: %s", rollout_id, env.seq, env.reason)
                continue
            state = decider.fold(state, env.event, env.subject)
        return state, last

    async def transact(
        self, decider: Decider[S, C], rollout_id: str, command: C, known: tuple[S, int] | None = None
    ) -> Transacted[S]:
        """Load the rollout, fold, decide, append with OCC; re-decide on conflict (bounded).

        ``known`` is a (state, sequence) the caller believes current (it wrote it last): the command is
        first decided on it, saving the load; any doubt (a refusal or nothing to do on that state, or a
        conflict) falls back to the stored history. Returns the events appended ([] when the decider
        found nothing to do: an idempotent repeat) and the state after them. Invalid commands raise
        from ``decide`` on the stored history and append nothing.
        """
        for _ in range(self.settings.conflict_retries + 1 + (known is not None)):
            if known is not None:
                (state, last), known = known, None
                try:
                    events = decider.decide(command, state)
                except VoltbusError:  # maybe only on a stale state: the history decides
                    continue
                if not events:
                    continue
            else:
                state, last = await self.load(decider, rollout_id)
                events = decider.decide(command, state)
                if not events:
                    return Transacted(events=[], state=state, seq=last)
            try:
                ack = await self.append(events, expected_seq=last)
            except ConcurrencyConflict:
                log.debug("transact %s: conflict at %d, re-deciding", rollout_id, last)
                continue
            for event in events:
                state = decider.evolve(state, event)
            return Transacted(events=list(events), state=state, seq=ack.seq)
        raise ConcurrencyConflict(self.topology.rollout_any(rollout_id), last, await self.head(rollout_id))

    async def first_seq_at(self, stream: StreamName, at: float) -> int | None:
        """Sequence of the first message of ``stream`` stored at or after time ``at`` (None: none)."""
        name = self.topology.control_stream if stream == "control" else self.topology.spans_stream
        end = (await self.js.stream_info(name)).state.last_seq
        if end == 0:
            return None
        last = await self.js.get_msg(name, seq=end, direct=True)
        if last.time is not None and last.time.timestamp() < at:
            return None  # nothing that recent: no need to ask a consumer
        start = ConsumerConfig(opt_start_time=dt.datetime.fromtimestamp(at, dt.UTC))
        sub = await self.js.subscribe(
            WHOLE_STREAM,
            stream=name,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.BY_START_TIME,
            config=start,
        )
        try:
            msg = await sub.next_msg(timeout=self.settings.request_timeout_s)
            return msg.metadata.sequence.stream
        except TimeoutError:
            return None
        finally:
            await unsubscribe(sub)

    def feed(self, stream: StreamName = "control") -> Feed:
        """A batch reader of a stream for projectors (open it at a sequence, then take batches)."""
        name = self.topology.control_stream if stream == "control" else self.topology.spans_stream
        decode = codec.decode_control if stream == "control" else codec.decode_spans
        return Feed(self.nc, self.js, name, WHOLE_STREAM, decode)

    def replay(
        self,
        stream: StreamName = "control",
        from_seq: int = 1,
        from_time: float | None = None,
        to_seq: int | None = None,
        follow: bool = False,
        subject: str | None = None,
    ) -> AsyncIterator[Envelope | BadEvent]:
        """Every message of a stream in order; undecodable ones come as BadEvent with their sequence.

        ``follow`` keeps the replay open after the stored messages, yielding new ones as they arrive;
        ``subject`` narrows it to one subject filter (wildcards allowed). Only stored messages are
        delivered, never a batch that is still uncommitted.
        """
        name = self.topology.control_stream if stream == "control" else self.topology.spans_stream
        decode = codec.decode_control if stream == "control" else codec.decode_spans
        subjects = subject or WHOLE_STREAM
        replay = replay_stream(self.js, name, subjects, decode, from_seq, from_time, to_seq, follow=follow)
        self._replays.add(replay)
        return replay

    async def telemetry(
        self, from_seq: int = 1, to_seq: int | None = None, follow: bool = False
    ) -> AsyncIterator[Envelope | BadEvent]:
        """The spans stream event by event: each event of a ``SpanBatch`` as an envelope of its own, with its
        message's sequence, subject and time; undecodable messages as BadEvent."""
        replay = self.replay("spans", from_seq=from_seq, to_seq=to_seq, follow=follow)
        try:
            async for item in replay:
                if isinstance(item, BadEvent):
                    yield item
                    continue
                for event in items_of(item.event):  # type: ignore[arg-type]
                    yield msgspec.structs.replace(item, event=event)
        finally:
            await replay.aclose()  # type: ignore[attr-defined]
