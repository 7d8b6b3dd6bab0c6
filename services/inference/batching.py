"""The micro-batcher: requests that arrive close together are generated as one batch.

A batch starts once no request has arrived for ``batch_quiet_ms`` (or ``batch_max_wait_ms`` after
the first one), or when ``max_batch_rows`` sequences wait. All ``n`` samples of a request go into the
same batch. A batch runs under the weights lock, so it samples every token from one weight version,
and that version is the label of all its responses.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from voltbus.services.restart import stop_if_cancelled
from voltbus.services.settings import InferenceSettings

from .engine import Engine, Piece, Row
from .swap import Weights

log = logging.getLogger(__name__)

FAILED = -1
"""Row index of the piece a streamed job receives when its batch failed."""


def settle(future: asyncio.Future, value: object) -> None:
    """Resolve ``future`` with ``value`` (an exception sets it failed) unless it is already done (cancelled)."""
    if future.done():
        return
    if isinstance(value, BaseException):
        future.set_exception(value)
    else:
        future.set_result(value)


@dataclass
class Job:
    """One HTTP request's rows; ``started`` resolves with the weight version when its batch begins."""

    rows: list[Row]
    started: asyncio.Future[str] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    pieces: asyncio.Queue[tuple[int, Piece]] = field(default_factory=asyncio.Queue)
    """For streamed requests: (row index, piece) as the engine produces them."""

    def cancel(self) -> None:
        """Stop generating this request's rows (the client went away); a job still waiting is dropped."""
        for row in self.rows:
            row.cancelled = True
        self.done.cancel()


@dataclass
class Stats:
    """Counters shown at ``/stats``."""

    requests: int = 0
    batches: int = 0
    sequences: int = 0
    tokens: int = 0
    largest_batch: int = 0
    failed_batches: int = 0
    aborted: int = 0
    """Sequences stopped early because their client went away."""
    running: int = 0
    """Sequences in the batch being generated now (0: idle)."""


class Batcher:
    """Gathers jobs into batches and runs them one at a time on the engine's worker thread."""

    def __init__(self, engine: Engine, weights: Weights, cfg: InferenceSettings) -> None:
        self.engine, self.weights, self.cfg = engine, weights, cfg
        self.waiting: list[Job] = []
        self.arrived = asyncio.Event()
        self.running = asyncio.Event()
        self.running.set()
        self.stats = Stats()

    def submit(self, rows: list[Row]) -> Job:
        """Queue one request's rows for the next batch."""
        job = Job(rows)
        self.waiting.append(job)
        self.stats.requests += 1
        self.arrived.set()
        return job

    async def pause(self) -> None:
        """Start no new batch; return once the batch in progress (if any) has finished."""
        self.running.clear()
        async with self.weights.lock:
            pass

    def resume(self) -> None:
        self.running.set()

    async def run_forever(self) -> None:
        """Form and run batches until cancelled."""
        while True:
            await self.arrived.wait()
            await self._gather()
            await self.running.wait()
            jobs = self._take()
            try:
                if jobs:
                    await self._run(jobs)
            except Exception as exc:  # a bug here must fail these requests, not stall every later one
                for job in jobs:
                    settle(job.started, exc)
                    settle(job.done, exc)
                stop_if_cancelled()  # the error may have stood for a cancel
                log.exception("batch of %d requests failed outside generation", len(jobs))
            if not self.waiting:
                self.arrived.clear()

    async def _gather(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.batch_max_wait_ms / 1000
        while self._rows_waiting() < self.cfg.max_batch_rows:
            self.arrived.clear()
            left = min(self.cfg.batch_quiet_ms / 1000, deadline - loop.time())
            if left <= 0:
                return
            try:
                async with asyncio.timeout(left):
                    await self.arrived.wait()
            except TimeoutError:
                return

    def _rows_waiting(self) -> int:
        return sum(len(j.rows) for j in self.waiting)

    def _take(self) -> list[Job]:
        """Jobs for one batch, oldest first, up to ``max_batch_rows`` rows (at least one job)."""
        taken, rows = [], 0
        while self.waiting and (not taken or rows + len(self.waiting[0].rows) <= self.cfg.max_batch_rows):
            job = self.waiting.pop(0)
            if job.done.done():  # the client went away before its batch started
                continue
            taken.append(job)
            rows += len(job.rows)
        return taken

    async def _run(self, jobs: list[Job]) -> None:
        loop = asyncio.get_running_loop()
        rows = [r for j in jobs for r in j.rows]
        owner = {id(r): (j, i) for j in jobs for i, r in enumerate(j.rows)}

        def route(pieces: list[tuple[Row, Piece]]) -> None:
            for row, piece in pieces:
                job, index = owner[id(row)]
                job.pieces.put_nowait((index, piece))

        def emit(pieces: list[tuple[Row, Piece]]) -> None:
            loop.call_soon_threadsafe(route, pieces)

        streamed = any(r.streamed for r in rows)
        async with self.weights.lock:
            for job in jobs:
                settle(job.started, self.weights.version)
            self.stats.running = len(rows)
            try:
                await asyncio.to_thread(self.engine.generate, rows, emit if streamed else None)
            except Exception as exc:
                log.exception("generation failed for a batch of %d sequences", len(rows))
                self.stats.failed_batches += 1
                for job in jobs:
                    job.pieces.put_nowait((FAILED, Piece(finish_reason="error", text=str(exc))))
                    settle(job.done, exc)
                return
            finally:
                self.stats.running = 0
        self._count(rows)
        for job in jobs:
            loop.call_soon(settle, job.done, None)  # after the last routed pieces

    def _count(self, rows: list[Row]) -> None:
        self.stats.batches += 1
        self.stats.sequences += len(rows)
        self.stats.aborted += sum(r.finish_reason == "abort" for r in rows)
        self.stats.tokens += sum(len(r.token_ids) for r in rows)
        self.stats.largest_batch = max(self.stats.largest_batch, len(rows))
