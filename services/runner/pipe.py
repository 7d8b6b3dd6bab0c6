"""An agent process's only way to the log (isolated child or agent host): request frames to its runner over a pipe.

The process holds no bus credentials and no connection. Its ``PipeStore`` offers the few store calls a
rollout makes (start and end its attempt, reserve span sequence ids, publish spans); each becomes a
frame (``services/frames.py``) on one pipe, answered (by id) on another. The runner's ``PipeServer``
carries them out on its own store, and only for the attempts it assigned to that process (one for an
isolated child; those running in an agent host): anything else is refused, logged, and nothing is
appended. An agent can thus write to its own attempts only, which it can already do through the
gateway's event route. An agent host also reports ``ready`` (its agent loaded) and each rollout ``done``.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec

from voltbus.schemas.errors import InvalidCommand, VoltbusError
from voltbus.schemas.rollouts import ErrorInfo
from voltbus.schemas.spans import RewardReported, SpanRecorded
from voltbus.services.clients.store import AttemptedRollout, Span, Store
from voltbus.services.frames import Codec, FrameTooLarge, next_frame, receive

log = logging.getLogger(__name__)

MAX_FRAME = 64 * 1024 * 1024
"""The largest frame either side accepts (bytes)."""
MAX_SEQUENCE_BATCH = 100_000
RAN_KEPT = 4096
"""Rollouts whose past attempts a process may still store telemetry for (``PipeServer.ran``)."""
"""The most span sequence ids one request may reserve."""


class UpdateAttempt(msgspec.Struct, kw_only=True, tag="update_attempt", tag_field="op"):
    rollout_id: str
    attempt_id: str
    status: str


class FinishAttempt(msgspec.Struct, kw_only=True, tag="finish_attempt", tag_field="op"):
    rollout_id: str
    attempt_id: str
    error: ErrorInfo | None = None


class ExpireAttempt(msgspec.Struct, kw_only=True, tag="expire_attempt", tag_field="op"):
    rollout_id: str
    attempt_id: str
    status: str


class NextSequence(msgspec.Struct, kw_only=True, tag="next_sequence", tag_field="op"):
    rollout_id: str
    count: int = 1


class SequenceIds(msgspec.Struct, kw_only=True, tag="sequence_ids", tag_field="op"):
    pairs: list[tuple[str, str]]


class PublishSpans(msgspec.Struct, kw_only=True, tag="publish_spans", tag_field="op"):
    events: list[SpanRecorded | RewardReported]
    batch: bool = False


class AddSpans(msgspec.Struct, kw_only=True, tag="add_spans", tag_field="op"):
    spans: list[Span]


class Ready(msgspec.Struct, kw_only=True, tag="ready", tag_field="op"):
    """An agent host loaded its agent (``error``: why it could not)."""

    error: str | None = None


class Done(msgspec.Struct, kw_only=True, tag="done", tag_field="op"):
    """An agent host is done with a rollout it was given (its attempt ended, or could not be)."""

    rollout_id: str
    attempt_id: str


Request = (
    UpdateAttempt | FinishAttempt | ExpireAttempt | NextSequence | SequenceIds | PublishSpans | AddSpans | Ready | Done
)


class Call(msgspec.Struct, kw_only=True):
    """One request frame."""

    id: int
    request: Request


class Reply(msgspec.Struct, kw_only=True):
    """One reply frame: ``value``, or ``error`` with its ``kind`` (refused, invalid or failed)."""

    id: int
    value: Any = None
    error: str | None = None
    kind: str = ""


class SpanLimits(msgspec.Struct, kw_only=True):
    """The span sizes the runner's settings allow (what ``events_of`` clips to)."""

    span_value_max_bytes: int
    span_max_bytes: int


class NotYourAttempt(VoltbusError):
    """The runner refused a request about another rollout or attempt than the child's own."""


class CommandRefused(InvalidCommand):
    """The runner's store refused the command (e.g. the attempt already ended)."""


class RequestFailed(VoltbusError):
    """The runner could not carry out the request, or the pipe broke."""


_ERRORS: dict[str, type[VoltbusError]] = {"refused": NotYourAttempt, "invalid": CommandRefused}


CALLS: Codec[Call] = Codec(Call)
"""Request frames, to the runner."""
REPLIES: Codec[Reply] = Codec(Reply)
"""Reply frames, from the runner."""


class PipeStore:
    """The child's store: the calls a rollout makes, sent to the runner (also its own ``log``)."""

    def __init__(self, requests_fd: int, replies_fd: int, limits: SpanLimits) -> None:
        self.requests_fd, self.replies_fd, self.settings = requests_fd, replies_fd, limits
        self.log = self
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def call_blocking(self, request: Request) -> Any:
        """Send one request and wait for its reply; raise what the runner reported."""
        with self._lock:
            os.write(self.requests_fd, CALLS.frame(Call(id=next(self._ids), request=request)))
            try:
                reply = REPLIES.decode(receive(lambda view: os.readv(self.replies_fd, [view]), MAX_FRAME))
            except EOFError:
                raise RequestFailed("the runner closed the pipe") from None
            except FrameTooLarge as exc:
                raise RequestFailed(f"a reply of {exc.size} bytes") from None
        return unwrap(reply)

    async def call(self, request: Request) -> Any:
        return await asyncio.to_thread(self.call_blocking, request)

    async def update_attempt(self, rollout_id: str, attempt_id: str, status: str) -> None:
        await self.call(UpdateAttempt(rollout_id=rollout_id, attempt_id=attempt_id, status=status))

    async def finish_attempt(
        self, rollout_id: str, attempt_id: str, error: ErrorInfo | None = None, worker_id: str | None = None
    ) -> None:
        """End the attempt (the runner names the worker itself)."""
        await self.call(FinishAttempt(rollout_id=rollout_id, attempt_id=attempt_id, error=error))

    async def expire_attempt(self, rollout_id: str, attempt_id: str, status: str) -> None:
        await self.call(ExpireAttempt(rollout_id=rollout_id, attempt_id=attempt_id, status=status))

    async def next_sequence(self, rollout_id: str, count: int = 1) -> int:
        return int(await self.call(NextSequence(rollout_id=rollout_id, count=count)))

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: list[tuple[str, str]]) -> list[int]:
        return [int(i) for i in await self.call(SequenceIds(pairs=list(rollout_attempt_ids)))]

    async def publish_spans(self, events: list[SpanRecorded | RewardReported], batch: bool = False) -> None:
        await self.call(PublishSpans(events=list(events), batch=batch))

    async def add_many_spans(self, spans: list[Span]) -> list[Span]:
        await self.call(AddSpans(spans=list(spans)))
        return list(spans)

    async def close(self) -> None:
        os.close(self.requests_fd)
        os.close(self.replies_fd)


def unwrap(reply: Reply) -> Any:
    """The reply's value; raise what the runner reported."""
    if reply.error is not None:
        raise _ERRORS.get(reply.kind, RequestFailed)(reply.error)
    return reply.value


def _touched(request: Request) -> list[tuple[str, str | None]]:
    """The (rollout, attempt) pairs a request acts on; None: the rollout only."""
    if isinstance(request, Ready | Done):  # no write; a Done for a rollout the runner let go of already is moot
        return []
    if isinstance(request, UpdateAttempt | FinishAttempt | ExpireAttempt):
        return [(request.rollout_id, request.attempt_id)]
    if isinstance(request, NextSequence):
        return [(request.rollout_id, None)]
    if isinstance(request, SequenceIds):
        return list(request.pairs)
    items = request.events if isinstance(request, PublishSpans) else request.spans
    return [(item.rollout_id, item.attempt_id) for item in items]


class PipeServer:
    """The runner's side: carries out one agent process's requests on ``store``, for its assigned attempts only."""

    def __init__(
        self,
        store: Store,
        rollout: AttemptedRollout | None,
        requests_fd: int,
        replies_fd: int,
        most_in_flight: int = 1,
    ) -> None:
        self.store = store
        self.requests_fd, self.replies_fd = requests_fd, replies_fd
        self.assigned: dict[str, AttemptedRollout] = {rollout.rollout_id: rollout} if rollout else {}
        """rollout id -> the attempt the process may write to (an agent host's change as its jobs come and go)."""
        self.ran: collections.OrderedDict[str, set[str]] = collections.OrderedDict()
        """rollout id -> attempts the process ran and was let go of (the latest ``RAN_KEPT`` rollouts): their
        telemetry still queued in the process (spans a bus outage held back) may be stored, nothing else."""
        self.most_in_flight = most_in_flight
        """Requests carried out at once (an agent host's slots wait on theirs concurrently)."""
        self.refused = 0
        self.published: dict[str, float] = {}
        """rollout id -> ``time.monotonic()`` of its last stored spans (the heartbeat's sign of life)."""
        self.on_ready: Callable[[str | None], None] | None = None
        self.on_done: Callable[[str, str], None] | None = None

    def release(self, rollout_id: str) -> None:
        """The process no longer runs ``rollout_id``'s attempt: it may still store that attempt's telemetry."""
        held = self.assigned.pop(rollout_id, None)
        if held is not None:
            self.ran.setdefault(rollout_id, set()).add(held.attempt.attempt_id)
            self.ran.move_to_end(rollout_id)
            while len(self.ran) > RAN_KEPT:
                self.ran.popitem(last=False)

    def refusal(self, request: Request) -> str | None:
        """Why the request is refused, or None when it concerns the process's assigned attempts only (telemetry:
        or attempts it ran before)."""
        telemetry = isinstance(request, PublishSpans | AddSpans | SequenceIds | NextSequence)
        for r, a in _touched(request):
            held = self.assigned.get(r)
            if telemetry and r in self.ran and (a is None or a in self.ran[r]):
                continue
            if held is None or a not in (held.attempt.attempt_id, None):
                name = type(request).__name__
                return f"{name} for rollout {r!r} attempt {a!r}: the agent may only write to {self._own()}"
        if isinstance(request, NextSequence) and not 1 <= request.count <= MAX_SEQUENCE_BATCH:
            return f"NextSequence of {request.count} ids"
        return None

    def _own(self) -> str:
        if len(self.assigned) == 1:
            [held] = self.assigned.values()
            return f"{held.rollout_id}/{held.attempt.attempt_id}"
        return f"the {len(self.assigned)} attempts its runner gave it"

    async def perform(self, request: Request) -> Any:
        """Carry out an allowed request on the runner's store."""
        store = self.store
        if isinstance(request, Ready):
            if self.on_ready is not None:
                self.on_ready(request.error)
        elif isinstance(request, Done):
            if self.on_done is not None:
                self.on_done(request.rollout_id, request.attempt_id)
        elif isinstance(request, UpdateAttempt | FinishAttempt | ExpireAttempt):
            held = self.assigned[request.rollout_id]
            rid, aid = held.rollout_id, held.attempt.attempt_id
            if isinstance(request, UpdateAttempt):
                await store.update_attempt(rid, aid, status=request.status)
            elif isinstance(request, FinishAttempt):
                await store.finish_attempt(rid, aid, request.error, worker_id=held.attempt.worker_id)
            else:
                await store.expire_attempt(rid, aid, request.status)
        elif isinstance(request, NextSequence):
            return await store.log.next_sequence(request.rollout_id, request.count)
        elif isinstance(request, SequenceIds):
            return await store.get_many_span_sequence_ids(request.pairs)
        else:
            if isinstance(request, PublishSpans):
                await store.log.publish_spans(request.events, batch=request.batch)
            else:
                await store.add_many_spans(request.spans)
            now = time.monotonic()
            for rid, _ in _touched(request):
                self.published[rid] = now
        return None

    async def answer(self, body: bytes) -> Reply:
        """The reply to one request frame."""
        try:
            call = CALLS.decode(body)
        except msgspec.DecodeError as exc:
            call, problem = None, f"not a request: {exc}"
        else:
            problem = self.refusal(call.request)
        if call is None or problem is not None:
            self.refused += 1
            log.warning("%s: refused the agent process's request: %s", self._own(), problem)
            return Reply(id=call.id if call else 0, error=f"refused: {problem}", kind="refused")
        try:
            return Reply(id=call.id, value=await self.perform(call.request))
        except InvalidCommand as exc:
            return Reply(id=call.id, error=f"{type(exc).__name__}: {exc}", kind="invalid")
        except Exception as exc:
            log.warning("%s: agent request failed: %s: %s", self._own(), type(exc).__name__, exc)
            return Reply(id=call.id, error=f"{type(exc).__name__}: {exc}", kind="failed")

    async def serve(self) -> None:
        """Answer requests (``most_in_flight`` at once) until the process closes its end or breaks the protocol."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_FRAME)
        read_t, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(self.requests_fd, "rb", buffering=0)
        )
        write_t, write_p = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(self.replies_fd, "wb", buffering=0)
        )
        writer = asyncio.StreamWriter(write_t, write_p, None, loop)
        room = asyncio.Semaphore(self.most_in_flight)
        answering: set[asyncio.Task[None]] = set()
        try:
            while (body := await self._next(reader)) is not None:
                await room.acquire()  # a process that floods requests waits here, as does its pipe
                task = asyncio.create_task(self._reply(body, writer, room))
                answering.add(task)
                task.add_done_callback(answering.discard)
            await asyncio.gather(*answering, return_exceptions=True)
        finally:
            for task in answering:
                task.cancel()
            await asyncio.gather(*answering, return_exceptions=True)
            read_t.close()
            write_t.close()

    async def _reply(self, body: bytes, writer: asyncio.StreamWriter, room: asyncio.Semaphore) -> None:
        try:
            writer.write(REPLIES.frame(await self.answer(body)))
            await writer.drain()  # a process that stops reading stalls only its own requests
        except (ConnectionError, BrokenPipeError):  # it is gone: its end closed the pipe
            return
        finally:
            room.release()

    async def _next(self, reader: asyncio.StreamReader) -> bytes | None:
        try:
            return await next_frame(reader, MAX_FRAME)
        except FrameTooLarge as exc:
            log.warning("%s: a request frame of %d bytes; pipe closed", self._own(), exc.size)
            return None
        except asyncio.IncompleteReadError:
            return None
