"""Agent Lightning 0.3's store benchmark on voltbus: runner processes, the bus, a projector; next to no store at all.

Run: ``python -m tests.benchmarks.bench_runner`` (flags: ``--help``) or ``pytest -m bench tests/benchmarks``.

The agent is AL's benchmark agent (``store_agent.py``): up to ``rounds`` rounds of nested spans with
random attributes, a reward after about half the rounds, a final span and a final reward in [1, 2].
The server is started as in ``bench_eventlog`` (production ``BusSettings``: ``sync_interval: always``).

voltbus side: the runners are real processes, ``python -m voltbus.services.runner
tests.benchmarks.store_agent:agent``, configured by ``VOLTBUS_*`` variables, each with ``slots``
concurrent rollouts. This process plays AL's algorithm: it publishes an LLM resource and enqueues
rollouts one ``enqueue_rollout`` at a time (AL's ``AlgorithmBatch``). A projector follows both
streams into a fresh DuckDB file in this process (``services.projector.follow.project``, production batch
size and ``max_wait``). After each committed batch the projector's progress callback counts
terminal rollouts and stored spans in DuckDB; the algorithm waits on that (no polling sleeps).
A run's clock stops when every rollout is terminal and every span it should have is in DuckDB.
Then each rollout is checked as AL's ``check_spans`` does (succeeded, a span with ``task=<task>``,
final reward in [1, 2]) and its spans are counted against the number the agent draws for its task.

Scenarios (AL's CI workloads, scaled to this machine):
  queue   AL's ``batch_partial`` ("long queue": 4 rounds, sleep 0.1 s): keep ``in_flight`` rollouts
          enqueued and unfinished, topping up whenever ``in_flight/8`` have finished
  batch   AL's ``batch`` ("minimal": 6 rounds, sleep 0.5 s): enqueue ``batch`` rollouts, wait until all
          are finished and their spans stored, then the next batch
  queue_c<N>  the queue workload with N rollouts in flight (``--concurrency``, default 8 and 32: the issue's
          "8 and 32 concurrent rollouts"), on the same 2 runner processes; ``--concurrency-rollouts`` per N
          (default 32 x N, at least 256)

no-store side: the same agent function called directly in this process, by ``in_flight`` tasks
pulling from a local queue (queue) or working through each batch (batch), with a DummyTracer active
and an OpenTelemetry SDK tracer that exports nothing. Nothing is sent anywhere.

Each side runs ``--reps`` times, alternating which goes first; the table and the ledger hold medians.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.benchmarks import store_agent
from tests.benchmarks.bench_eventlog import (
    CSV_PATH,
    ROOT,
    Figure,
    Run,
    server_version,
    summarize,
    table,
    write_csv,
)
from voltbus.agent import DummyTracer, clear_active_tracer, set_active_tracer
from voltbus.schemas.resources import LLM
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.projector.follow import project
from voltbus.services.projector.forks import Forks
from voltbus.services.projector.projector import Projector
from voltbus.services.settings import BusSettings, NatsSettings, RunnerSettings, Settings
from voltbus.store import EnqueueRolloutRequest, Store, connect

AGENT = "tests.benchmarks.store_agent:agent"
TERMINAL = ("succeeded", "failed", "cancelled")
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Scenario:
    """One of AL's workloads: how many rollouts, how they are submitted, the agent's knobs, the runners."""

    name: str
    mode: str  # "queue" (AL's batch_partial) or "batch"
    rollouts: int
    in_flight: int  # queue: rollouts kept enqueued and unfinished; batch: the batch size
    runners: int  # AL's runner count (what the scenario names)
    procs: int  # voltbus runner processes; each gets in_flight // procs slots
    rounds: int
    sleep_s: float

    @property
    def slots(self) -> int:
        return max(1, self.in_flight // self.procs)


@dataclass
class Options:
    """What to run; the defaults keep a whole run under about four minutes on two cores."""

    queue: Scenario = field(default_factory=lambda: Scenario("queue", "queue", 1024, 256, 16, 2, 4, 0.1))
    batch: Scenario = field(default_factory=lambda: Scenario("batch", "batch", 512, 256, 8, 2, 6, 0.5))
    reps: int = 3
    warmup: int = 32
    heartbeat_s: float = RunnerSettings().heartbeat_s
    claim_wait_s: float = RunnerSettings().claim_wait_s
    scenarios: list[str] = field(default_factory=lambda: ["queue", "batch"])
    enqueue_many: bool = False
    """Enqueue each top-up / batch with one ``enqueue_many_rollouts`` call instead of AL's one at a time."""
    concurrency: list[int] = field(default_factory=lambda: [8, 32])
    """Also run the queue workload with each of these many rollouts in flight (the issue's 8 and 32)."""
    concurrency_rollouts: int = 0
    """Rollouts per run of a concurrency case (0: 32 per rollout in flight, at least 256)."""
    variants: bool = True
    """Also run once each: the queue scenario with the other enqueue style, and each scenario with one
    process per AL runner (``runners`` processes)."""
    csv: Path | None = CSV_PATH
    readers: dict[str, int] = field(default_factory=lambda: Settings().projector.readers)
    """The projector's reader processes per stream, as the projector service runs by default."""


@dataclass
class Outcome:
    """One timed run of one side."""

    run: Run  # rollouts, seconds, per-rollout seconds from enqueue to finished
    spans: int
    expected: int
    lost: int = 0
    bad: list[str] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds by process group
    msgs: tuple[int, int] = (0, 0)  # messages the runner processes sent to / got from nats-server
    batches: dict[str, int] = field(default_factory=dict)  # projector transactions per stream
    events: dict[str, int] = field(default_factory=dict)  # projected events per stream
    counting_s: float = 0.0  # this benchmark's own DuckDB counts after each batch
    enqueue_ms: float = 0.0  # median enqueue_rollout call
    in_flight: float = 0.0  # time-weighted mean of rollouts enqueued and not yet terminal in DuckDB


class Occupancy:
    """Time-weighted mean of a count that changes at known instants."""

    def __init__(self) -> None:
        self.area, self.since, self.value, self.start = 0.0, time.perf_counter(), 0, time.perf_counter()

    def set(self, value: int) -> None:
        now = time.perf_counter()
        self.area += (now - self.since) * self.value
        self.since, self.value = now, value

    def mean(self) -> float:
        self.set(self.value)
        return self.area / max(1e-9, self.since - self.start)


# ---------------------------------------------------------------- watching the projection


class Watch:
    """Counts in the projector's DuckDB, refreshed after every committed batch; waits on changes."""

    def __init__(self, projector: Projector) -> None:
        self.cursor = projector.con.cursor()
        self.terminal = self.spans = self.workers = 0
        self.changed = asyncio.Event()
        self.batches = dict.fromkeys(("control", "spans"), 0)
        self.counting_s = 0.0
        self.hook: Callable[[], None] | None = None

    def progress(self, stream: str, position: int, end: int) -> None:
        t = time.perf_counter()
        self.batches[stream] += 1
        q = self.cursor.execute
        if stream == "spans":
            self.spans = q("SELECT count(*) FROM spans").fetchone()[0]  # type: ignore[index]
        else:
            self.terminal = q("SELECT count(*) FROM rollouts WHERE status IN ?", [list(TERMINAL)]).fetchone()[0]  # type: ignore[index]
            self.workers = q("SELECT count(*) FROM workers").fetchone()[0]  # type: ignore[index]
        self.counting_s += time.perf_counter() - t
        if self.hook:
            self.hook()
        self.changed.set()

    async def until(self, condition: Callable[[], bool], timeout: float) -> None:
        """Wait (event-driven) until ``condition()`` holds after some committed batch."""
        async with asyncio.timeout(timeout):
            while not condition():
                self.changed.clear()
                await self.changed.wait()


# ---------------------------------------------------------------- runner processes


def runner_msgs(monitor_port: int | None) -> tuple[int, int]:
    """Messages all runner connections sent to and received from the server so far (its /connz)."""
    if not monitor_port:
        return (0, 0)
    with urllib.request.urlopen(f"http://127.0.0.1:{monitor_port}/connz?limit=4096", timeout=5) as r:
        conns = json.loads(r.read())["connections"]
    mine = [c for c in conns if c.get("name", "").startswith(("voltbus-runner", "voltbus-heartbeat"))]
    return sum(c["in_msgs"] for c in mine), sum(c["out_msgs"] for c in mine)


def proc_cpu(pid: int) -> float:
    """utime + stime of a process, seconds (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


class Runners:
    """``procs`` runner processes on one namespace, stderr to files."""

    def __init__(self, nats: NatsSettings, sc: Scenario, opts: Options, logs: Path) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs = [logs / f"runner-{sc.name}-p{sc.procs}-{i}.log" for i in range(sc.procs)]
        for i, path in enumerate(self.logs):
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
                "VOLTBUS_NATS__URL": nats.url,
                "VOLTBUS_NATS__NAMESPACE": nats.namespace,
                "VOLTBUS_RUNNER__SLOTS": str(sc.slots),
                "VOLTBUS_RUNNER__CLAIM_WAIT_S": str(opts.claim_wait_s),
                "VOLTBUS_RUNNER__HEARTBEAT_S": str(opts.heartbeat_s),
                "VOLTBUS_RUNNER__WORKER_PREFIX": f"R{i}",
                "VOLTBUS_LOG_LEVEL": "WARNING",
                "BENCH_MAX_ROUNDS": str(sc.rounds),
                "BENCH_SLEEP_S": str(sc.sleep_s),
            }
            profile = os.environ.get("BENCH_PROFILE_DIR")  # cProfile each runner into that folder
            prof = ["-m", "cProfile", "-o", f"{profile}/runner-{sc.name}-{i}.prof"] if profile else []
            with path.open("wb") as err:
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, *prof, "-m", "voltbus.services.runner", AGENT],
                        cwd=ROOT,
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                    )
                )

    def check(self) -> None:
        for proc, path in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"runner {proc.pid} exited {proc.returncode}:\n{path.read_text()[-3000:]}")

    def cpu(self) -> float:
        return sum(proc_cpu(p.pid) for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# ---------------------------------------------------------------- the voltbus side


class VoltbusSide:
    """One scenario's namespace: the algorithm's store client, the projector, the runner processes."""

    def __init__(self, server: NatsServer, sc: Scenario, opts: Options, tmp: Path, many: bool = False) -> None:
        self.server, self.sc, self.opts, self.tmp, self.many = server, sc, opts, tmp, many
        stamp = f"{os.getpid()}x{int(time.time()) % 100000}"
        self.nats = NatsSettings(url=server.url, namespace=f"benchrun{stamp}{sc.name}p{sc.procs}{'m' if many else 'o'}")
        self.store: Store | None = None
        self.projector: Projector | None = None
        self.watch: Watch | None = None
        self.stop = asyncio.Event()
        self.following: asyncio.Task[None] | None = None
        self.runners: Runners | None = None
        self.tasks: dict[str, str] = {}  # rollout id -> task
        self.enqueue_latencies: list[float] = []
        self.occupancy = Occupancy()
        self.active: Callable[[], int] = lambda: 0
        self.enqueued = 0  # rollouts enqueued in the current run
        self.forks = Forks()
        """The readers' fork server of this side's projector, as a running projector has one."""

    async def __aenter__(self) -> VoltbusSide:
        self.store = await connect(settings=self.nats, name="bench-algorithm")
        p = Settings().projector  # the projector as the service runs it (VOLTBUS_PROJECTOR__*)
        path = self.tmp / f"{self.nats.namespace}.duckdb"
        self.projector = Projector(path, threads=p.duckdb_threads, refresh_interval=p.training_refresh_s)
        self.watch = Watch(self.projector)
        if any(self.opts.readers.values()):
            await asyncio.to_thread(self.forks.start)  # as a running projector has it
        self.following = asyncio.create_task(
            project(
                self.projector,
                self.store.log,
                stop=self.stop,
                progress=self.watch.progress,
                batch_size=p.batch_size,
                max_wait=p.max_wait_s,
                readers=self.opts.readers,
                backlog=p.reader_backlog,
                forks=self.forks,
            )
        )
        self.runners = Runners(self.nats, self.sc, self.opts, self.tmp)
        want = self.sc.procs * self.sc.slots
        t = time.perf_counter()
        await self.until(lambda: self.watch.workers >= want, 120)  # type: ignore[union-attr]
        print(
            f"  {self.sc.name}: {self.sc.procs} runner processes x {self.sc.slots} slots up in "
            f"{time.perf_counter() - t:.1f}s"
        )
        if self.opts.warmup:
            await self.run("warm", self.opts.warmup, check=False)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self.runners:
            await asyncio.to_thread(self.runners.stop)
        self.stop.set()
        if self.following:
            await asyncio.wait_for(self.following, 30)
        if self.projector:
            self.watch.cursor.close()  # type: ignore[union-attr]
            self.projector.close()
        await asyncio.to_thread(self.forks.stop)
        if self.store:
            await self.store.close()

    async def until(self, condition: Callable[[], bool], timeout: float) -> None:
        """Wait for ``condition`` while checking that the runners and the projector are alive."""
        assert self.watch is not None and self.runners is not None and self.following is not None
        deadline = time.perf_counter() + timeout
        while not condition():
            self.runners.check()
            if self.following.done():
                self.following.result()
                raise RuntimeError("the projector stopped")
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"{self.sc.name}: no completion after {timeout}s")
            with contextlib.suppress(TimeoutError):
                await self.watch.until(condition, min(left, 5.0))

    async def enqueue(self, tag: str, first: int, n: int) -> list[tuple[str, float]]:
        """Publish a resource version, then enqueue ``n`` rollouts one at a time (as AL's algorithm does)."""
        assert self.store is not None
        await self.store.add_resources(
            {"llm": LLM(endpoint=f"http://localhost:{first}/v1", model=f"test-model-{tag}-{first}")}
        )
        out = []
        if self.many:  # voltbus's pipelined write: one call per top-up / batch
            t = time.perf_counter()
            tasks = [f"task-{tag}-{i}" for i in range(first, first + n)]
            requests = [EnqueueRolloutRequest(input=task, mode="train") for task in tasks]
            for task, rollout in zip(tasks, await self.store.enqueue_many_rollouts(requests), strict=True):
                self.tasks[rollout.rollout_id] = task
                out.append((rollout.rollout_id, t))
            self.enqueue_latencies.append((time.perf_counter() - t) / n)
            self.enqueued += n
            self.occupancy.set(self.active())
            return out
        for i in range(first, first + n):
            task = f"task-{tag}-{i}"
            t = time.perf_counter()
            rollout = await self.store.enqueue_rollout(input=task, mode="train")
            self.enqueue_latencies.append(time.perf_counter() - t)
            self.tasks[rollout.rollout_id] = task
            out.append((rollout.rollout_id, t))
            self.enqueued += 1
            self.occupancy.set(self.active())
        return out

    async def run(self, tag: str, total: int, check: bool = True) -> Outcome:
        assert self.watch is not None and self.runners is not None and self.server.proc is not None
        sc, w = self.sc, self.watch
        tasks = [f"task-{tag}-{i}" for i in range(total)]
        expected_each = [store_agent.expected_spans(t, sc.rounds) for t in tasks]
        terminal0, spans0 = w.terminal, w.spans
        batches0, positions0, counting0 = dict(w.batches), dict(self.projector.positions), w.counting_s  # type: ignore[union-attr]
        cpu0, msgs0 = self.cpu(), runner_msgs(self.server.monitor_port)
        enqueued: list[tuple[str, float]] = []
        self.enqueue_latencies, self.occupancy = [], Occupancy()
        self.enqueued = 0
        self.active = lambda: self.enqueued - (w.terminal - terminal0)
        w.hook = lambda: self.occupancy.set(self.active())
        start = time.perf_counter()
        if sc.mode == "queue":
            chunk = max(1, sc.in_flight // 8)
            while len(enqueued) < total:
                active = len(enqueued) - (w.terminal - terminal0)
                if active <= sc.in_flight - chunk or not enqueued:
                    n = min(sc.in_flight - active, total - len(enqueued))
                    enqueued += await self.enqueue(tag, len(enqueued), n)
                    continue
                target = len(enqueued) - sc.in_flight + chunk
                await self.until(lambda t=target: w.terminal - terminal0 >= t, 300)
            await self.until(lambda: w.terminal - terminal0 >= total and w.spans - spans0 >= sum(expected_each), 300)
        else:
            for first in range(0, total, sc.in_flight):
                n = min(sc.in_flight, total - first)
                enqueued += await self.enqueue(tag, first, n)
                want = sum(expected_each[: first + n])
                await self.until(lambda k=first + n, s=want: w.terminal - terminal0 >= k and w.spans - spans0 >= s, 300)
        seconds = time.perf_counter() - start
        w.hook = None
        cpu = {k: v - cpu0[k] for k, v in self.cpu().items()}
        outcome = Outcome(Run(total, seconds), w.spans - spans0, sum(expected_each), cpu=cpu)
        outcome.msgs = tuple(b - a for a, b in zip(msgs0, runner_msgs(self.server.monitor_port), strict=True))  # type: ignore[assignment]
        outcome.batches = {k: v - batches0[k] for k, v in w.batches.items()}
        outcome.events = {k: v - positions0[k] for k, v in self.projector.positions.items()}  # type: ignore[union-attr]
        outcome.counting_s = w.counting_s - counting0
        outcome.enqueue_ms = statistics.median(self.enqueue_latencies) * 1000
        outcome.in_flight = self.occupancy.mean()
        if check:
            self.check(outcome, enqueued, dict(zip(tasks, expected_each, strict=True)))
        return outcome

    def cpu(self) -> dict[str, float]:
        assert self.runners is not None and self.server.proc is not None
        return {
            "runners": self.runners.cpu(),
            "nats-server": proc_cpu(self.server.proc.pid),
            "bench (algorithm + projector)": time.process_time(),
            "projector readers": sum(proc_cpu(r.pid) for r in self.forks.live),
        }

    def check(self, outcome: Outcome, enqueued: list[tuple[str, float]], expected: dict[str, int]) -> None:
        """AL's check_spans per rollout, plus spans stored vs the spans the agent drew; latencies from DuckDB."""
        assert self.projector is not None
        ids = [rid for rid, _ in enqueued]
        q = self.projector.con.cursor()
        try:
            q.execute("CREATE OR REPLACE TEMP TABLE wanted (rollout_id VARCHAR)")
            q.executemany("INSERT INTO wanted VALUES (?)", [[i] for i in ids])
            rows = q.execute(
                """
                SELECT r.rollout_id, r.status, json_extract_string(r.input, '$'), r.end_time - r.start_time,
                       (SELECT count(*) FROM spans s WHERE s.rollout_id = r.rollout_id),
                       (SELECT count(*) FROM spans s WHERE s.rollout_id = r.rollout_id
                          AND json_extract_string(s.attributes, '$.task') = json_extract_string(r.input, '$')),
                       (SELECT value FROM rewards w WHERE w.rollout_id = r.rollout_id
                          ORDER BY seq DESC, seq_index DESC LIMIT 1)
                FROM rollouts r JOIN wanted USING (rollout_id)
                """
            ).fetchall()
        finally:
            q.close()
        assert len(rows) == len(ids), (len(rows), len(ids))
        latencies = []
        for rid, status, task, took, spans, with_task, final in rows:
            assert task == self.tasks[rid], (rid, task)
            latencies.append(took)
            outcome.lost += max(0, expected[task] - spans)
            if status != "succeeded":
                outcome.bad.append(f"{rid}: {status}")
            elif spans != expected[task]:
                outcome.bad.append(f"{rid}: {spans} spans stored, {expected[task]} recorded by the agent")
            elif not with_task:
                outcome.bad.append(f"{rid}: no span with task={task}")
            elif final is None or not 1.0 <= final <= 2.0:
                outcome.bad.append(f"{rid}: final reward {final}")
        outcome.run.latencies = latencies


# ---------------------------------------------------------------- the no-store side


async def no_store(sc: Scenario, tag: str, total: int) -> Outcome:
    """The same agent function, called directly by ``in_flight`` tasks, a DummyTracer active."""
    tasks = [f"task-{tag}-{i}" for i in range(total)]
    expected = sum(store_agent.expected_spans(t, sc.rounds) for t in tasks)
    store_agent.configure(sc.rounds, sc.sleep_s)
    llm = LLM(endpoint="http://localhost:0/v1", model="test-model")
    latencies: list[float] = []
    set_active_tracer(DummyTracer())
    cpu0 = time.process_time()
    try:
        start = time.perf_counter()
        waves = [tasks] if sc.mode == "queue" else [tasks[i : i + sc.in_flight] for i in range(0, total, sc.in_flight)]
        for wave in waves:
            queue: asyncio.Queue[tuple[str, float]] = asyncio.Queue()
            now = time.perf_counter()
            for t in wave:
                queue.put_nowait((t, now))

            async def slot(queue: asyncio.Queue[tuple[str, float]] = queue) -> None:
                while not queue.empty():
                    task, queued = queue.get_nowait()
                    await store_agent.agent(task, llm=llm)
                    latencies.append(time.perf_counter() - queued)

            await asyncio.gather(*(slot() for _ in range(sc.in_flight)))
        seconds = time.perf_counter() - start
    finally:
        clear_active_tracer()
    return Outcome(Run(total, seconds, latencies), expected, expected, cpu={"bench": time.process_time() - cpu0})


# ---------------------------------------------------------------- a scenario


SCENARIO_NOTES = {
    "queue": "AL batch_partial: keep {in_flight} in flight, {runners} runners -> {procs} procs x {slots} slots, "
    "<= {rounds} rounds, sleep {sleep_s}",
    "batch": "AL batch: batches of {in_flight}, {runners} runners -> {procs} procs x {slots} slots, "
    "<= {rounds} rounds, sleep {sleep_s}",
}


async def run_scenario(
    server: NatsServer, sc: Scenario, opts: Options, tmp: Path, reps: int, case: str, many: bool
) -> tuple[list[Figure], dict]:
    vbs: list[Outcome] = []
    raws: list[Outcome] = []
    async with VoltbusSide(server, sc, opts, tmp, many) as side:
        for rep in range(reps):
            order = ("raw", "vb") if rep % 2 == 0 else ("vb", "raw")
            for which in order:
                if which == "vb":
                    o = await side.run(f"r{rep}", sc.rollouts)
                    vbs.append(o)
                else:
                    raws.append(await no_store(sc, f"n{rep}", sc.rollouts))
                    o = raws[-1]
                print(
                    f"    rep {rep} {which:>3}: {o.run.rate:7.1f} rollouts/s {o.spans / o.run.seconds:8.1f} spans/s "
                    f"({o.run.seconds:.1f}s, {o.spans}/{o.expected} spans, lost {o.lost}, bad {len(o.bad)})"
                    + ("" if which == "raw" else "  cpu " + ", ".join(f"{k} {v:.1f}s" for k, v in o.cpu.items()))
                )
                if which == "vb":
                    print(
                        "      projector: "
                        + ", ".join(f"{k} {o.events[k]} events in {o.batches[k]} batches" for k in o.events)
                        + f"; counting {o.counting_s:.2f}s; enqueue_rollout p50 {o.enqueue_ms:.1f} ms;"
                        + f" mean in flight {o.in_flight:.0f}; runner messages per rollout"
                        + f" {o.msgs[0] / o.run.events:.1f} sent, {o.msgs[1] / o.run.events:.1f} received"
                    )
                if o.bad:
                    print("      " + "\n      ".join(o.bad[:5]))
    note = SCENARIO_NOTES[sc.mode].format(**vars(sc), slots=sc.slots)
    note += ", enqueue_many_rollouts" if many else ", enqueue_rollout one at a time"
    note += f", mean in flight {statistics.median(o.in_flight for o in vbs):.0f}"
    rollouts = summarize(case, [o.run for o in vbs], [o.run for o in raws], note)
    spans = Figure(
        case=f"{case}_spans",
        events=int(statistics.median(o.spans for o in vbs)),
        rate=statistics.median(o.spans / o.run.seconds for o in vbs),
        p50_ms=None,
        p99_ms=None,
        raw_rate=statistics.median(o.spans / o.run.seconds for o in raws),
        raw_p50_ms=None,
        raw_p99_ms=None,
        note=f"spans/s; lost {sum(o.lost for o in vbs)} of {sum(o.expected for o in vbs)}, "
        f"failed checks {sum(len(o.bad) for o in vbs)}",
    )
    extra = {
        "lost": sum(o.lost for o in vbs),
        "bad": sum(len(o.bad) for o in vbs),
        "expected": sum(o.expected for o in vbs),
        "cpu_per_rollout_ms": {k: statistics.median(o.cpu[k] / o.run.events * 1000 for o in vbs) for k in vbs[0].cpu},
        "no_store_cpu_per_rollout_ms": statistics.median(o.cpu["bench"] / o.run.events * 1000 for o in raws),
        "seconds": statistics.median(o.run.seconds for o in vbs),
    }
    return [rollouts, spans], extra


def concurrency_scenarios(options: Options) -> list[Scenario]:
    """The queue workload at each ``options.concurrency`` rollouts in flight, on the queue scenario's processes."""
    q = options.queue
    rollouts = options.concurrency_rollouts
    return [
        replace(q, name=f"queue_c{n}", in_flight=n, procs=min(q.procs, n), rollouts=rollouts or max(256, 32 * n))
        for n in options.concurrency
    ]


def quiet_otel() -> None:
    """Silence OpenTelemetry's "Attributes dict is full" warning (AL's random attributes pass its 128 limit)."""
    logging.getLogger("opentelemetry.attributes").setLevel(logging.ERROR)


async def run(options: Options, data_dir: Path, echo: Callable[[str], None] = print) -> list[Figure]:
    """Start the server, run the scenarios, print the table, append to the ledger; return the figures."""
    with socket.socket() as probe:  # a free port for the server's monitoring (runner message counts)
        probe.bind(("127.0.0.1", 0))
        monitor = probe.getsockname()[1]
    bus = BusSettings(data_dir=data_dir / "nats", port=0, monitor_port=monitor)
    server = NatsServer(bus, NatsSettings().max_payload).start()
    echo(f"nats-server {server_version()} at {server.url}, sync_interval: always={bus.sync_always}")
    figures: list[Figure] = []
    extras: dict[str, dict] = {}
    try:
        many = options.enqueue_many
        runs = [(getattr(options, n), options.reps, f"al_{n}", many) for n in options.scenarios]
        runs += [(sc, options.reps, f"al_{sc.name}", many) for sc in concurrency_scenarios(options)]
        for n in options.scenarios if options.variants else ():
            sc: Scenario = getattr(options, n)
            if n == "queue":  # is the algorithm's enqueue the limit?
                runs.append((sc, 1, f"al_{n}_{'one' if many else 'many'}", not many))
            if sc.runners != sc.procs:  # one process per AL runner
                runs.append((replace(sc, procs=sc.runners), 1, f"al_{n}_{sc.runners}procs", many))
        for sc, reps, case, many in runs:
            t = time.perf_counter()
            got, extras[case] = await run_scenario(server, sc, options, data_dir, reps, case, many)
            figures += got
            echo(f"  {case}: {time.perf_counter() - t:.1f}s, lost spans {extras[case]['lost']}")
    finally:
        server.stop()
    echo(table(figures))
    for name, extra in extras.items():
        cpu = ", ".join(f"{k} {v:.1f}" for k, v in extra["cpu_per_rollout_ms"].items())
        echo(f"{name}: CPU ms per rollout (voltbus): {cpu}; no store: {extra['no_store_cpu_per_rollout_ms']:.1f}")
    if options.csv is not None:
        write_csv(options.csv, figures)
        echo(f"appended {len(figures)} rows to {options.csv}")
    return figures


def parse_args(argv: Sequence[str] | None = None) -> Options:
    d = Options()
    p = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_runner", description=__doc__.split("\n")[0])
    for sc in (d.queue, d.batch):
        n = sc.name
        p.add_argument(f"--{n}-rollouts", type=int, default=sc.rollouts, help="rollouts per run (%(default)s)")
        p.add_argument(
            f"--{n}-in-flight",
            type=int,
            default=sc.in_flight,
            help=("rollouts kept in flight" if n == "queue" else "batch size") + " (%(default)s)",
        )
        p.add_argument(f"--{n}-procs", type=int, default=sc.procs, help="runner processes (%(default)s)")
        p.add_argument(f"--{n}-rounds", type=int, default=sc.rounds, help="most rounds per rollout (%(default)s)")
        p.add_argument(f"--{n}-sleep", type=float, default=sc.sleep_s, help="most sleep per span, s (%(default)s)")
    p.add_argument("--reps", type=int, default=d.reps, help="repetitions; medians are reported (%(default)s)")
    p.add_argument("--warmup", type=int, default=d.warmup, help="untimed rollouts per scenario first (%(default)s)")
    p.add_argument("--heartbeat", type=float, default=d.heartbeat_s, help="runner heartbeat_s (%(default)s)")
    p.add_argument("--claim-wait", type=float, default=d.claim_wait_s, help="runner claim_wait_s (%(default)s)")
    p.add_argument("--scenarios", nargs="+", choices=["queue", "batch"], default=d.scenarios, help="(both)")
    p.add_argument(
        "--enqueue-many", action="store_true", help="enqueue_many_rollouts per top-up / batch (AL: one at a time)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        nargs="*",
        default=d.concurrency,
        help="also the queue workload with each of these many rollouts in flight (%(default)s; none: skip)",
    )
    p.add_argument(
        "--concurrency-rollouts", type=int, default=0, help="rollouts per concurrency run (0: 32 x in flight, >= 256)"
    )
    p.add_argument(
        "--no-variants",
        action="store_true",
        help="skip the single runs of the other enqueue style and of one process per AL runner (16 / 8)",
    )
    p.add_argument(
        "--span-readers", type=int, default=d.readers["spans"], help="projector readers of spans (%(default)s)"
    )
    p.add_argument(
        "--control-readers", type=int, default=d.readers["control"], help="projector readers of control (%(default)s)"
    )
    p.add_argument("--csv", type=Path, default=d.csv, help="ledger to append to (%(default)s)")
    p.add_argument("--no-csv", action="store_true", help="do not append to the ledger")
    a = vars(p.parse_args(argv))
    for sc in (d.queue, d.batch):
        n = sc.name
        sc.rollouts, sc.in_flight, sc.procs = a[f"{n}_rollouts"], a[f"{n}_in_flight"], a[f"{n}_procs"]
        sc.rounds, sc.sleep_s = a[f"{n}_rounds"], a[f"{n}_sleep"]
    d.reps, d.warmup, d.heartbeat_s, d.claim_wait_s = a["reps"], a["warmup"], a["heartbeat"], a["claim_wait"]
    d.scenarios, d.csv = a["scenarios"], None if a["no_csv"] else a["csv"]
    d.variants, d.enqueue_many = not a["no_variants"], a["enqueue_many"]
    d.concurrency, d.concurrency_rollouts = a["concurrency"], a["concurrency_rollouts"]
    d.readers = {"spans": a["span_readers"], "control": a["control_readers"]}
    return d


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(argv)
    quiet_otel()
    with tempfile.TemporaryDirectory(prefix="voltbus-bench-") as tmp:
        asyncio.run(run(options, Path(tmp)))


if __name__ == "__main__":
    main()
