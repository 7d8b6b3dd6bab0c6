"""Agent Lightning's algorithm pattern on voltbus and on Agent Lightning 0.3.0, in the same run; and no store at all.

Run: ``python -m tests.benchmarks.bench_al_pattern --al-python PATH`` (``--help``). The algorithm is
``al_pattern`` (AL's ``benchmark_store.py`` ``AlgorithmBatch``: enqueue, poll, ``query_spans`` per finished
rollout, check), the agent ``store_agent`` (AL's benchmark agent), both with only the import differing per side.

voltbus, run as its docs say: ``voltbus nats``, ``voltbus coordinator``, ``voltbus projector`` with shipped
defaults, ``voltbus runner --agent tests.benchmarks.store_agent:agent -n N`` processes, and the algorithm in this
process through ``voltbus.connect(bus, projector_url=...)``. Two runner set-ups: ``runners`` (one process, ``-n``
= AL's runner count: the same concurrency as AL) and ``slots`` (two processes whose slots hold every rollout the
algorithm keeps in flight: how a voltbus user runs an async agent; AL needs a process per concurrent rollout).

Agent Lightning 0.3.0 (``al_side``): ``agl store`` (in-memory), ``Trainer(n_runners=N, strategy cs)``, its
default tracer, under ``--al-python`` (a venv with ``agentlightning==0.3.0`` and the OpenTelemetry of its day:
see BENCHMARKS.md, "Agent Lightning's algorithm pattern").

no store: the agent function called in this process by as many tasks as the side's concurrency.

Rates are rollouts/s from the first enqueue to the last checked rollout. CPU is every process of the side (the
store side, runners with their children, the algorithm), read from /proc just before they stop.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.benchmarks import store_agent
from tests.benchmarks.al_pattern import SHAPES, Shape, run_pattern
from tests.conftest import free_port
from voltbus.agent import DummyTracer, clear_active_tracer, set_active_tracer
from voltbus.schemas.resources import LLM

ROOT = Path(__file__).resolve().parents[2]
VOLTBUS = str(Path(sys.executable).with_name("voltbus"))
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    """One run of one side."""

    side: str
    rate: float
    rollouts: int
    spans: int
    bad: int
    cpu: dict[str, float] = field(default_factory=dict)
    latency: dict[str, list[float]] = field(default_factory=dict)
    """Seconds per call of each timed store method, in the run and in the probe after it (``probe_*``)."""
    rss: dict[str, int] = field(default_factory=dict)
    """Resident bytes of each service (with its children) at the end of the run."""
    ready_s: float = 0.0
    """From starting the services to the projector's first answer and the coordinator's catch-up with the log."""
    notes: dict[str, Any] = field(default_factory=dict)
    """The coordinator's catch-up time, the projector's DuckDB memory by tag (MiB), at the end of the run; each
    service's CPU seconds in the run alone (``cpu`` counts their start too)."""

    @property
    def cpu_ms_per_rollout(self) -> float:
        return 1000 * sum(self.cpu.values()) / max(1, self.rollouts)


def tree_cpu(pid: int) -> float:
    """CPU seconds used by a live process and all its live descendants (/proc)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / TICK
    tree, grew = {pid}, True
    while grew:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(times.get(p, 0.0) for p in tree)


def tree_rss(pid: int) -> int:
    """Resident bytes of a live process and all its live descendants (/proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    tree, grew = {pid}, True
    while grew:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    total = 0
    for p in tree:
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total


def _stamp(line: str) -> float | None:
    """The time of a voltbus log line ("2026-12-06 14:05:35,607 ..."), or None."""
    try:
        return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


class Services:
    """voltbus's processes for one run, started as its docs say; stopped (and their CPU read) on exit."""

    def __init__(self, tmp: Path, shape: Shape, procs: int, slots: int, data: Path | None = None) -> None:
        """``data``: where the store (``js/``) and the projection are, e.g. a synthetic log (default ``tmp``)."""
        data = data or tmp
        self.port, self.sql_port = free_port(), free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.projector_url = f"http://127.0.0.1:{self.sql_port}"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "VOLTBUS_NATS__URL": self.url,
            "VOLTBUS_PROJECTOR__PORT": str(self.sql_port),
            "VOLTBUS_PROJECTOR__URL": self.projector_url,
            "VOLTBUS_PROJECTOR__DB": str(data / "projection.duckdb"),
            "VOLTBUS_RUNNER__KEY_DIR": str(tmp / "keys"),
            "BENCH_MAX_ROUNDS": str(shape.rounds),
            "BENCH_SLEEP_S": str(shape.sleep_s),
        }
        self.tmp, self.procs, self.slots, self.data = tmp, procs, slots, data
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.started: dict[str, float] = {}

    def start(self, name: str, *args: str) -> None:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        self.started[name] = time.time()
        self.running[name] = subprocess.Popen([VOLTBUS, *args], env=self.env, stdout=log, stderr=log, cwd=ROOT)

    def __enter__(self) -> Services:
        self.start("nats", "nats", "--port", str(self.port), "--data-dir", str(self.data / "js"))
        self.wait_port(self.port)
        self.start("coordinator", "coordinator")
        self.start("projector", "projector")
        for i in range(self.procs):
            self.start(f"runner{i}", "runner", "--agent", "tests.benchmarks.store_agent:agent", "-n", str(self.slots))
        deadline = time.monotonic() + 600
        while True:
            try:
                urllib.request.urlopen(self.projector_url + "/health", timeout=2).close()
                break
            except OSError:
                self.check_alive()
                assert time.monotonic() < deadline, "the projector did not answer in 600 s"
                time.sleep(0.1)
        while self.catch_up_s is None:  # the coordinator folds the whole control stream once at start: not timed
            self.check_alive()
            assert time.monotonic() < deadline, "the coordinator did not catch up in 600 s"
            time.sleep(0.2)
        self.ready_s = time.monotonic() - deadline + 600
        return self

    def check_alive(self) -> None:
        for name, proc in self.running.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}: see {self.tmp / (name + '.log')}")

    def wait_port(self, port: int) -> None:
        deadline = time.monotonic() + 60
        import socket

        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            self.check_alive()
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            time.sleep(0.05)

    def cpu(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, proc in self.running.items():
            group = "runners" if name.startswith("runner") else name
            out[group] = out.get(group, 0.0) + tree_cpu(proc.pid)
        return out

    def rss(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, proc in self.running.items():
            group = "runners" if name.startswith("runner") else name
            out[group] = out.get(group, 0) + tree_rss(proc.pid)
        return out

    @property
    def catch_up_s(self) -> float | None:
        """Seconds from the coordinator's start to its "caught up" log line (None: not yet)."""
        lines = (self.tmp / "coordinator.log").read_text(errors="replace").splitlines()
        done = [t for line in lines if "caught up" in line and (t := _stamp(line)) is not None]
        return round(done[0] - self.started["coordinator"], 2) if done else None

    def __exit__(self, *_: object) -> None:
        for proc in reversed(list(self.running.values())):
            proc.terminate()
        for proc in self.running.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


TIMED = ("query_spans", "query_rollouts", "wait_for_rollouts", "enqueue_rollout")


class Timed:
    """A store whose ``TIMED`` methods record each call's wall time (``latency``); the rest passes through."""

    def __init__(self, store: Any, latency: dict[str, list[float]], prefix: str = "") -> None:
        self._store, self._latency, self._prefix = store, latency, prefix

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if name not in TIMED:
            return method

        async def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            finally:
                self._latency.setdefault(self._prefix + name, []).append(time.perf_counter() - start)

        return timed


async def probe(voltbus: Any, url: str, projector_url: str, ids: list[str], latency: dict[str, list[float]]) -> None:
    """Each query of the pattern asked 100 times about ``ids`` (ended rollouts, old and new), by new clients:
    ``query_rollouts`` and ``wait_for_rollouts`` of 128 of them, and ``query_spans`` of one by a client that saw none
    of them finish (so it goes to the projector for that rollout alone, not through the batched fetch)."""
    store = await voltbus.connect(url, projector_url=projector_url)
    alone = await voltbus.connect(url, projector_url=projector_url)
    timed, spans = Timed(store, latency, "probe_"), Timed(alone, latency, "probe_")
    try:
        for i in range(100):
            wave = [ids[(i * 128 + k) % len(ids)] for k in range(128)]
            await timed.query_rollouts(rollout_id_in=wave)
            await timed.wait_for_rollouts(rollout_ids=wave, timeout=0.0)
            await spans.query_spans(ids[(i * 7919) % len(ids)], attempt_id="latest")
    finally:
        await store.close()
        await alone.close()


async def old_ids(store: Any, n: int) -> list[str]:
    """``n`` ids of rollouts already in the projection (a synthetic log's), or none."""
    found = await store.query_rollouts(status_in=["succeeded"], limit=n)
    return [r.rollout_id for r in found.items]


async def voltbus_side(
    shape: Shape, poll_s: float, procs: int, slots: int, tag: str, data: Path | None = None, passes: int = 1
) -> Result:
    """One side's run: the pattern ``passes`` times on the same services (the rate, CPU and latencies are the last
    pass's; the earlier passes warm the services' caches, e.g. a long log's indexes, and their rates are noted)."""
    import voltbus

    latency: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-al-") as tmp, Services(Path(tmp), shape, procs, slots, data) as svc:
        store = await voltbus.connect(svc.url, projector_url=svc.projector_url)
        try:
            deadline = time.monotonic() + 600
            while len(await store.query_workers()) < 1:  # a runner is there to claim
                svc.check_alive()
                assert time.monotonic() < deadline, "no runner reported in 600 s"
                await asyncio.sleep(0.1)
            before = await old_ids(store, 64)
            warm_rates = []
            for _ in range(passes - 1):
                warm = await run_pattern(voltbus, store, shape, poll_s)
                warm_rates.append(round(warm.rollouts / warm.seconds, 1))
                print(f"    pass {len(warm_rates)}: {warm_rates[-1]} rollouts/s, ends {time.time():.0f}", flush=True)
            cpu0, started = time.process_time(), svc.cpu()
            tally = await run_pattern(voltbus, Timed(store, latency), shape, poll_s)
            algo = time.process_time() - cpu0
            cpu, rss = svc.cpu(), svc.rss()
            in_run = {k: round(v - started.get(k, 0.0), 1) for k, v in cpu.items()}
            memory = await store._rows("SELECT tag, memory_usage_bytes AS b FROM duckdb_memory() WHERE b > 0", {})
            catch_up = svc.catch_up_s
            await probe(voltbus, svc.url, svc.projector_url, before + tally.ids, latency)
        finally:
            await store.close()
    cpu["algorithm"] = algo
    result = Result(f"voltbus {tag}", tally.rollouts / tally.seconds, tally.rollouts, tally.spans, len(tally.bad), cpu)
    result.latency, result.rss = latency, rss
    result.ready_s = svc.ready_s
    result.notes = {"duckdb_mib": {r["tag"]: r["b"] >> 20 for r in memory}, "coordinator_catch_up_s": catch_up}
    result.notes["cpu_s_in_run"] = in_run  # the CPU above counts each service's start too (a long log's catch-up)
    if warm_rates:
        result.notes["earlier_passes_rollouts_s"] = warm_rates
    return result


def al_side(shape: Shape, poll_s: float, al_python: str) -> Result:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_AGL": "agentlightning"}
    env["BENCH_MAX_ROUNDS"], env["BENCH_SLEEP_S"] = str(shape.rounds), str(shape.sleep_s)
    with tempfile.TemporaryDirectory() as tmp:  # its working directory: AL's AgentOps writes agentops.log there
        done = subprocess.run(
            [
                al_python,
                "-m",
                "tests.benchmarks.al_side",
                shape.name,
                str(poll_s),
                str(free_port()),
                str(shape.rollouts),
            ],
            env=env,
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=1800,
        )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"tally"')]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"Agent Lightning's side failed ({done.returncode}): {done.stderr[-3000:]}")
    got = json.loads(lines[-1])
    tally = got["tally"]
    total = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    cpu = {"store": got["store_cpu"], "runners+algorithm": total - got["store_cpu"]}
    return Result(
        "AL 0.3.0", tally["rollouts"] / tally["seconds"], tally["rollouts"], tally["spans"], len(tally["bad"]), cpu
    )


async def no_store(shape: Shape, concurrency: int) -> Result:
    """The agent function called directly by ``concurrency`` tasks, a DummyTracer active."""
    store_agent.configure(shape.rounds, shape.sleep_s)
    llm = LLM(endpoint="http://localhost:0/v1", model="test-model")
    tasks = [f"task-{i}" for i in range(shape.rollouts)]
    gate = asyncio.Semaphore(concurrency)

    async def one(task: str) -> None:
        async with gate:
            await store_agent.agent(task, llm=llm)

    set_active_tracer(DummyTracer())
    cpu0, start = time.process_time(), time.perf_counter()
    try:
        waves = (
            [tasks[i : i + shape.batch] for i in range(0, len(tasks), shape.batch)]
            if shape.mode == "batch"
            else [tasks]
        )
        for wave in waves:
            await asyncio.gather(*(one(t) for t in wave))
    finally:
        clear_active_tracer()
    seconds = time.perf_counter() - start
    return Result(
        f"no store x{concurrency}", len(tasks) / seconds, len(tasks), 0, 0, {"bench": time.process_time() - cpu0}
    )


def slots_of(shape: Shape) -> int:
    """Slots per process (two processes) to hold all the rollouts the algorithm keeps in flight."""
    return (shape.batch + shape.in_flight + 1) // 2 if shape.mode == "queue" else (shape.batch + 1) // 2


async def scenario(shape: Shape, opts: argparse.Namespace) -> list[list[Result]]:
    runs: list[list[Result]] = []
    for rep in range(opts.reps):
        sides = [side for side in opts.sides if side != "al" or opts.al_python]
        sides += ["prefill"] if opts.prefill else []
        if rep % 2:
            sides.reverse()
        row = []
        for side in sides:
            if side == "al":
                row.append(al_side(shape, opts.poll_s, opts.al_python))
            elif side == "runners":
                row.append(await voltbus_side(shape, opts.poll_s, 1, shape.runners, "runners", passes=opts.passes))
            elif side == "slots":
                row.append(await voltbus_side(shape, opts.poll_s, 2, slots_of(shape), "slots", passes=opts.passes))
            else:  # against the synthetic log
                row.append(
                    await voltbus_side(
                        shape, opts.poll_s, 2, slots_of(shape), "slots prefilled", opts.prefill, opts.passes
                    )
                )
            r = row[-1]
            print(
                f"  {shape.name} rep {rep}: {r.side:18} {r.rate:7.1f} rollouts/s, {r.spans} spans, {r.bad} bad, "
                f"CPU {r.cpu_ms_per_rollout:.1f} ms/rollout { ({k: round(v, 1) for k, v in r.cpu.items()}) }",
                flush=True,
            )
            if r.latency:
                print(
                    f"    {latencies(r)}\n    RSS MiB { ({k: v >> 20 for k, v in r.rss.items()}) }, "
                    f"ready in {r.ready_s:.1f} s, {r.notes}",
                    flush=True,
                )
        if not opts.no_baseline:
            row.append(await no_store(shape, shape.runners))
            row.append(await no_store(shape, 2 * slots_of(shape)))
        runs.append(row)
    return runs


def latencies(r: Result) -> str:
    """p50 / p99 ms of each timed call."""
    parts = []
    for name, values in sorted(r.latency.items()):
        q = statistics.quantiles(values, n=100) if len(values) > 1 else values * 99
        parts.append(f"{name} p50 {1000 * statistics.median(values):.1f} p99 {1000 * q[98]:.1f} (n {len(values)})")
    return "; ".join(parts)


def summarize(shape: Shape, runs: list[list[Result]]) -> None:
    by: dict[str, list[Result]] = {}
    for row in runs:
        for r in row:
            by.setdefault(r.side, []).append(r)
    al = statistics.median(r.rate for r in by.get("AL 0.3.0", [])) if "AL 0.3.0" in by else None
    print(f"\nscenario {shape.name} ({shape}):")
    for side, results in by.items():
        rate = statistics.median(r.rate for r in results)
        cpu = statistics.median(r.cpu_ms_per_rollout for r in results)
        ratio = f"{rate / al:5.2f}x AL" if al else ""
        print(
            f"  {side:18} {rate:7.1f} rollouts/s {ratio}  CPU {cpu:6.1f} ms/rollout  bad {sum(r.bad for r in results)}"
        )


def main() -> None:
    logging.getLogger("opentelemetry.sdk.trace").setLevel(logging.ERROR)  # no store: AL's attribute dicts exceed 128
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--al-python", help="Python of a venv with agentlightning==0.3.0 (omit: voltbus only)")
    parser.add_argument("--scenarios", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--poll-s", type=float, default=0.5, help="sleep after a poll that found nothing (AL: 5)")
    parser.add_argument("--scale", type=int, nargs="+", default=[1], help="multiply each scenario's rollouts")
    parser.add_argument("--sides", nargs="+", default=["al", "runners", "slots"], choices=["al", "runners", "slots"])
    parser.add_argument("--no-baseline", action="store_true", help="skip the no-store runs")
    parser.add_argument(
        "--passes", type=int, default=1, help="run the pattern this many times per voltbus side, report the last"
    )
    parser.add_argument(
        "--prefill",
        type=Path,
        help="also run slots against this synthetic log (synthetic_log.py --dir, projected; it is appended to)",
    )
    opts = parser.parse_args()
    for name in opts.scenarios:
        for scale in opts.scale:
            shape = Shape(**{**SHAPES[name].__dict__, "rollouts": SHAPES[name].rollouts * scale})
            summarize(shape, asyncio.run(scenario(shape, opts)))


if __name__ == "__main__":
    main()
