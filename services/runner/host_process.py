"""The agent host process: loads the agent once, then runs the rollouts its runner sends, many at once.

It never connects to the bus: its store is a ``HostStore``, a ``PipeStore`` whose requests from every
rollout share one pipe, their replies matched by id. Started by ``host.AgentHost`` with three pipe fds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from typing import Any

import msgspec

from voltbus.services.clients.agent.global_spans import route_global_spans
from voltbus.services.clients.agent.instrument import instrument_openai
from voltbus.services.clients.agent.otel import LogTracer
from voltbus.services.clients.telemetry.tracing import clear_active_tracer, set_active_tracer
from voltbus.services.frames import FrameTooLarge, next_frame
from voltbus.services.log import configure_logging

from .execute import run_rollout
from .host import Cancel, Job, Run, Start
from .loader import load_agent
from .pipe import (
    CALLS,
    MAX_FRAME,
    REPLIES,
    Call,
    Done,
    PipeStore,
    Ready,
    Reply,
    Request,
    RequestFailed,
    SpanLimits,
    unwrap,
)

log = logging.getLogger(__name__)


class HostStore(PipeStore):
    """A ``PipeStore`` for concurrent rollouts: requests sent from the event loop, replies matched by id."""

    def __init__(self, requests_fd: int, replies_fd: int, limits: SpanLimits) -> None:
        super().__init__(requests_fd, replies_fd, limits)
        self.waiting: dict[int, asyncio.Future[Reply]] = {}
        self.writer: asyncio.StreamWriter | None = None
        self.reading: asyncio.Task[None] | None = None
        self.broken = False

    async def open(self) -> None:
        """Start reading replies."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_FRAME)
        replies = os.fdopen(self.replies_fd, "rb", buffering=0)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), replies)
        requests = os.fdopen(self.requests_fd, "wb", buffering=0)
        write_t, write_p = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, requests)
        self.writer = asyncio.StreamWriter(write_t, write_p, None, loop)
        self.reading = asyncio.create_task(self._read(reader))

    async def call(self, request: Request) -> Any:
        """Send one request; its reply's value (or what the runner reported, raised)."""
        if self.broken or self.writer is None:
            raise RequestFailed("the runner closed the pipe")
        call_id = next(self._ids)
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.waiting[call_id] = fut
        try:
            self.writer.write(CALLS.frame(Call(id=call_id, request=request)))
            await self.writer.drain()
            return unwrap(await fut)
        finally:
            self.waiting.pop(call_id, None)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                reply = REPLIES.decode(await next_frame(reader, MAX_FRAME))
                fut = self.waiting.get(reply.id)
                if fut is None:
                    log.warning("a reply to request %d, which this host did not send: dropped", reply.id)
                elif not fut.done():
                    fut.set_result(reply)
        except (asyncio.IncompleteReadError, FrameTooLarge, msgspec.DecodeError, ConnectionError):
            pass
        finally:
            self.broken = True
            for fut in self.waiting.values():
                if not fut.done():
                    fut.set_exception(RequestFailed("the runner closed the pipe"))

    async def close(self) -> None:
        if self.reading is not None:
            self.reading.cancel()
        if self.writer is not None:
            self.writer.close()


class Host:
    """What the host process runs: the agent, its tracer, and the rollouts in progress (the agent's ``runner``)."""

    def __init__(self, agent: Any, store: HostStore) -> None:
        self.agent, self.store = agent, store
        self.tracer = LogTracer(store)
        self.jobs: dict[str, asyncio.Task[None]] = {}
        self.cancelled: set[str] = set()

    def take(self, job: Run | Cancel) -> None:
        """Start a rollout, or cancel one (once)."""
        if isinstance(job, Run):
            self.jobs[job.rollout.rollout_id] = asyncio.create_task(self.run(job))
        elif (task := self.jobs.get(job.rollout_id)) is not None and job.rollout_id not in self.cancelled:
            self.cancelled.add(job.rollout_id)
            task.cancel()

    async def run(self, job: Run) -> None:
        """One rollout, then ``Done`` (the runner stops accepting its requests)."""
        rollout = job.rollout
        rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
        try:
            await run_rollout(
                self.store, self.tracer, self.agent, rollout, (), self, key=job.key, resources=job.resources
            )  # type: ignore[arg-type]
        except asyncio.CancelledError:  # its attempt ended as Cancelled
            pass
        except Exception:  # run_rollout records the agent's errors: this is the pipe failing
            log.exception("rollout_id=%s attempt_id=%s: not ended", rid, aid)
        finally:
            self.jobs.pop(rid, None)
            self.cancelled.discard(rid)
            with contextlib.suppress(Exception):
                await self.store.call(Done(rollout_id=rid, attempt_id=aid))

    async def flush_spans(self, every: float = 0.2) -> None:
        """Publish spans while agents run (as the in-process runner does); spans of rollouts no longer here
        (a thread that outlived its rollout's timeout) are dropped, with a warning: the runner refuses them."""
        failing = False
        while True:
            try:
                await self.tracer.flush()
                failing = False
            except Exception as exc:  # kept and retried, unless their rollout is gone
                if not failing:
                    log.warning("span flush failed (the refused spans are retried): %s", exc)
                failing = True
                for rid in [*self.tracer.pending, *self.tracer.unsent]:
                    if rid not in self.jobs and (dropped := self.tracer.discard(rid)):
                        log.warning("rollout_id=%s: %d span(s) after the rollout ended, dropped", rid, dropped)
            await asyncio.sleep(every)  # the flush period, not synchronization


async def _jobs(fd: int) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=MAX_FRAME)
    pipe = os.fdopen(fd, "rb", buffering=0)
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    return reader


async def _next(reader: asyncio.StreamReader) -> Job | None:
    try:
        return msgspec.json.decode(await next_frame(reader), type=Job)  # type: ignore[arg-type]
    except asyncio.IncompleteReadError:
        return None  # the runner closed the pipe: it stops


async def main(requests_fd: int, replies_fd: int, jobs_fd: int) -> None:
    """Load the agent, report ready, run what the runner sends until it closes the jobs pipe."""
    store = HostStore(requests_fd, replies_fd, SpanLimits(span_value_max_bytes=0, span_max_bytes=0))
    await store.open()
    jobs = await _jobs(jobs_fd)
    start = await _next(jobs)
    if not isinstance(start, Start):
        return
    store.settings = start.limits
    try:
        agent = load_agent(start.agent)
    except Exception as exc:
        await store.call(Ready(error=str(exc)))
        return
    host = Host(agent, store)
    set_active_tracer(host.tracer)
    instrument_openai(host.tracer)
    route_global_spans()
    agent.set_runner(host)
    await store.call(Ready())
    flusher = asyncio.create_task(host.flush_spans())
    try:
        while (job := await _next(jobs)) is not None:
            if isinstance(job, Run | Cancel):
                host.take(job)
    finally:
        for task in host.jobs.values():
            task.cancel()
        with contextlib.suppress(TimeoutError):  # their attempts end Cancelled, unless the runner is gone
            await asyncio.wait_for(asyncio.gather(*host.jobs.values(), return_exceptions=True), 10)
        flusher.cancel()
        clear_active_tracer()
        host.tracer.shutdown()
        await store.close()


if __name__ == "__main__":
    configure_logging()
    from voltbus.services import loop

    loop.run(main(*(int(fd) for fd in sys.argv[1:4])))
