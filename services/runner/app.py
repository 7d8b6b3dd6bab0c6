"""The runner: N slots claim rollouts and run the agent on them; heartbeats from a thread; graceful stop.

``Runner.step(task)`` runs one task directly (no queue), raising the agent's error, for debugging.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from typing import Any

import nats.errors

from voltbus.agent.instrument import instrument_openai, uninstrument_openai
from voltbus.agent.litagent import LitAgent
from voltbus.agent.otel import LogTracer
from voltbus.agent.tracing import clear_active_tracer, set_active_tracer
from voltbus.schemas.errors import VoltbusError
from voltbus.services.keys import agent_key_for
from voltbus.services.restart import stop_if_cancelled
from voltbus.services.settings import Settings
from voltbus.store import AttemptedRollout, Rollout, Store, connect

from .dispatch import Dispatcher
from .execute import run_rollout
from .heartbeat import Heartbeat
from .isolate import agl_environment, run_isolated
from .loader import load_agent
from .session import open_sessions

log = logging.getLogger(__name__)

WORKER_NUMBERS = "_workers"
"""The bus counter that hands each runner its slots' worker numbers (rollout ids never start with ``_``)."""


class Runner:
    """One runner process: its store connection, tracer, heartbeat thread and slots."""

    def __init__(self, settings: Settings, agent: str | LitAgent[Any], hooks: Sequence[Any] = ()) -> None:
        self.settings = settings
        self.agent_path = agent if isinstance(agent, str) else None
        self.agent = load_agent(agent) if isinstance(agent, str) else agent
        self.hooks = list(hooks)
        cfg = settings.runner
        self.worker_ids = [f"{cfg.worker_prefix}-{i}" for i in range(cfg.slots)]
        self.store: Store | None = None
        self.tracer: LogTracer | None = None
        self.heartbeat: Heartbeat | None = None
        self.dispatcher: Dispatcher | None = None
        self.finished = 0
        self._busy_reports: set[asyncio.Task[None]] = set()
        if cfg.isolate and self.agent_path is None:
            raise ValueError("--isolate needs the agent as an import path ('module:attr')")

    async def __aenter__(self) -> Runner:
        nats = self.settings.nats.model_copy(update={"dequeue_wait_s": self.settings.runner.claim_wait_s})
        self.store = await connect(settings=nats, name="voltbus-runner")
        cfg = self.settings.runner
        if "worker_prefix" not in cfg.model_fields_set:  # Worker-<n>, numbered across every runner of the bus
            last = await self.store.log.next_sequence(WORKER_NUMBERS, cfg.slots)
            self.worker_ids = [f"{cfg.worker_prefix}-{n}" for n in range(last - cfg.slots, last)]
        await open_sessions(self.store, self.worker_ids)  # before any claim: settle what a previous process left
        self.dispatcher = Dispatcher(self.store, report_claims=self.settings.runner.busy_report_s == 0)
        self.tracer = LogTracer(self.store)
        set_active_tracer(self.tracer)
        instrument_openai(self.tracer)
        self.agent.set_runner(self)
        self.heartbeat = Heartbeat(self.settings.nats, self.worker_ids, self.settings.runner.heartbeat_s)
        self.heartbeat.main = (asyncio.get_running_loop(), self.store)
        self.heartbeat.spans_stored = self.tracer.published
        self.heartbeat.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        for task in list(self._busy_reports):
            task.cancel()
        await asyncio.gather(*self._busy_reports, return_exceptions=True)
        if self.heartbeat:
            await asyncio.to_thread(self.heartbeat.stop)
        uninstrument_openai()
        clear_active_tracer()
        if self.tracer:
            self.tracer.shutdown()
        if self.store:
            await self.store.close()

    async def run_one(self, rollout: AttemptedRollout, worker_id: str, raise_errors: bool = False) -> None:
        """Run one claimed rollout in this process or, with isolation, in a child process."""
        assert self.store is not None and self.tracer is not None and self.heartbeat is not None
        self.heartbeat.active[worker_id] = (rollout.rollout_id, rollout.attempt.attempt_id)
        key = agent_key_for(self.settings.gateway, rollout.rollout_id)
        delay = self.settings.runner.busy_report_s  # 0: the claim reported it busy already
        loop = asyncio.get_running_loop()
        busy = loop.call_later(delay, self._report_busy, worker_id, rollout.rollout_id) if delay else None
        try:
            if self.settings.runner.isolate and self.agent_path:
                gateway = self.settings.runner.gateway_url
                env = agl_environment(gateway, rollout, key) if gateway else None
                await run_isolated(self.store, self.agent_path, rollout, env, key)
            else:
                agent, hooks = self.agent, self.hooks
                await run_rollout(self.store, self.tracer, agent, rollout, hooks, self, raise_errors, key)
        finally:
            if busy is not None:
                busy.cancel()
            self.heartbeat.active.pop(worker_id, None)
            self.tracer.published.pop(rollout.rollout_id, None)
            self.finished += 1

    def _report_busy(self, worker_id: str, rollout_id: str) -> None:
        """Report the slot's worker busy: its attempt has run ``busy_report_s``."""
        if self.store is None:
            return
        task = asyncio.create_task(self._busy(self.store, worker_id, rollout_id))
        self._busy_reports.add(task)
        task.add_done_callback(self._busy_reports.discard)

    @staticmethod
    async def _busy(store: Store, worker_id: str, rollout_id: str) -> None:
        try:
            await store.report_worker_busy(worker_id, rollout_id)
        except (VoltbusError, TimeoutError, nats.errors.Error) as exc:  # not worth failing the rollout over
            log.warning("worker %s: busy status not reported: %s", worker_id, exc)

    async def slot(self, worker_id: str, stop: asyncio.Event, max_rollouts: int | None = None) -> None:
        """Claim and run rollouts until ``stop`` (or ``max_rollouts`` claimed by this slot)."""
        assert self.dispatcher is not None
        done = 0
        while not stop.is_set() and (max_rollouts is None or done < max_rollouts):
            rollout = await self.dispatcher.claim(worker_id)
            if rollout is not None:
                await self.run_one(rollout, worker_id)
                done += 1

    async def flush_spans(self, every: float = 0.2) -> None:
        """Publish spans while agents run, so a runner that dies keeps what its attempts already did. Spans the bus
        refuses are tried again later (the tracer pauses each such rollout, up to 5 s); one warning when refusals
        begin, one when they end."""
        assert self.tracer is not None
        failing = False
        while True:
            try:
                await self.tracer.flush()
                if failing:
                    log.info("span flushes go through again")
                failing = False
            except Exception as exc:  # keep flushing: the spans stay queued and are retried
                stop_if_cancelled()
                if not failing:
                    log.warning("span flush failed (the refused spans are retried): %s", exc)
                failing = True
            await asyncio.sleep(every)  # the flush period, not synchronization

    async def run(self, stop: asyncio.Event, max_rollouts: int | None = None) -> None:
        """Run every slot until ``stop``; running rollouts get ``shutdown_grace_s`` to finish, then end failed."""
        assert self.dispatcher is not None
        flusher = asyncio.create_task(self.flush_spans())
        halt = asyncio.Event()  # stop, or every slot is done
        relay = asyncio.create_task(_relay(stop, halt))
        dispatching = asyncio.create_task(self.dispatcher.run(halt))
        try:
            await self._run_slots(stop, max_rollouts)
        finally:
            halt.set()
            for task in (flusher, relay):
                task.cancel()
            await asyncio.gather(flusher, relay, dispatching, return_exceptions=True)

    async def _run_slots(self, stop: asyncio.Event, max_rollouts: int | None) -> None:
        slots = [asyncio.create_task(self.slot(w, stop, max_rollouts)) for w in self.worker_ids]
        done, _ = await asyncio.wait([asyncio.create_task(stop.wait()), *slots], return_when=asyncio.FIRST_COMPLETED)
        if not stop.is_set() and all(s.done() for s in slots):
            return
        _, late = await asyncio.wait(slots, timeout=self.settings.runner.shutdown_grace_s)
        for task in late:  # their attempts end failed ("the runner stopped during the rollout")
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    async def step(self, task: Any, resources: dict[str, Any] | None = None, mode: str | None = None) -> Rollout:
        """Run one task now, bypassing the queue; the agent's exception propagates (after the attempt failed)."""
        assert self.store is not None
        resources_id = None
        if resources is not None:
            update = await self.store.add_resources(resources)
            resources_id = f"{update.resources_id}:{update.version}"
        started = await self.store.start_rollout(
            task, mode=mode, resources_id=resources_id, worker_id=self.worker_ids[0]
        )
        await self.run_one(started, self.worker_ids[0], raise_errors=True)
        final = await self.store.get_rollout_by_id(started.rollout_id)
        assert final is not None
        return final


async def serve(settings: Settings, agent: str, stop: asyncio.Event | None = None) -> None:
    """``voltbus runner``: run until ``stop`` (SIGTERM / Ctrl-C in the CLI)."""
    stop = stop or asyncio.Event()
    async with Runner(settings, agent) as runner:
        log.info(
            "runner with %d slot(s) (%s) running %s",
            len(runner.worker_ids),
            "isolated" if settings.runner.isolate else "in-process",
            agent,
        )
        await runner.run(stop)


async def serve_until_signal(settings: Settings, agent: str) -> None:
    """``serve`` until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, agent, stop)


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()
