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


class Services:
    """voltbus's processes for one run, started as its docs say; stopped (and their CPU read) on exit."""

    def __init__(self, tmp: Path, shape: Shape, procs: int, slots: int) -> None:
        self.port, self.sql_port = free_port(), free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.projector_url = f"http://127.0.0.1:{self.sql_port}"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "VOLTBUS_NATS__URL": self.url,
            "VOLTBUS_PROJECTOR__PORT": str(self.sql_port),
            "VOLTBUS_PROJECTOR__URL": self.projector_url,
            "VOLTBUS_PROJECTOR__DB": str(tmp / "projection.duckdb"),
            "VOLTBUS_RUNNER__KEY_DIR": str(tmp / "keys"),
            "BENCH_MAX_ROUNDS": str(shape.rounds),
            "BENCH_SLEEP_S": str(shape.sleep_s),
        }
        self.tmp, self.procs, self.slots = tmp, procs, slots
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str) -> None:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        self.running[name] = subprocess.Popen([VOLTBUS, *args], env=self.env, stdout=log, stderr=log, cwd=ROOT)

    def __enter__(self) -> Services:
        self.start("nats", "nats", "--port", str(self.port), "--data-dir", str(self.tmp / "js"))
        self.wait_port(self.port)
        self.start("coordinator", "coordinator")
        self.start("projector", "projector")
        for i in range(self.procs):
            self.start(f"runner{i}", "runner", "--agent", "tests.benchmarks.store_agent:agent", "-n", str(self.slots))
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(self.projector_url + "/health", timeout=2).close()
                break
            except OSError:
                self.check_alive()
                assert time.monotonic() < deadline, "the projector did not answer in 120 s"
                time.sleep(0.1)
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

    def __exit__(self, *_: object) -> None:
        for proc in reversed(list(self.running.values())):
            proc.terminate()
        for proc in self.running.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


async def voltbus_side(shape: Shape, poll_s: float, procs: int, slots: int, tag: str) -> Result:
    import voltbus

    with tempfile.TemporaryDirectory(prefix="bench-al-") as tmp, Services(Path(tmp), shape, procs, slots) as svc:
        store = await voltbus.connect(svc.url, projector_url=svc.projector_url)
        try:
            deadline = time.monotonic() + 120
            while len(await store.query_workers()) < 1:  # a runner is there to claim
                svc.check_alive()
                assert time.monotonic() < deadline, "no runner reported in 120 s"
                await asyncio.sleep(0.1)
            cpu0 = time.process_time()
            tally = await run_pattern(voltbus, store, shape, poll_s)
            algo = time.process_time() - cpu0
            cpu = svc.cpu()
        finally:
            await store.close()
    cpu["algorithm"] = algo
    return Result(f"voltbus {tag}", tally.rollouts / tally.seconds, tally.rollouts, tally.spans, len(tally.bad), cpu)


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
        if rep % 2:
            sides.reverse()
        row = []
        for side in sides:
            if side == "al":
                row.append(al_side(shape, opts.poll_s, opts.al_python))
            elif side == "runners":
                row.append(await voltbus_side(shape, opts.poll_s, 1, shape.runners, "runners"))
            else:
                row.append(await voltbus_side(shape, opts.poll_s, 2, slots_of(shape), "slots"))
            r = row[-1]
            print(
                f"  {shape.name} rep {rep}: {r.side:18} {r.rate:7.1f} rollouts/s, {r.spans} spans, {r.bad} bad, "
                f"CPU {r.cpu_ms_per_rollout:.1f} ms/rollout { ({k: round(v, 1) for k, v in r.cpu.items()}) }",
                flush=True,
            )
        if not opts.no_baseline:
            row.append(await no_store(shape, shape.runners))
            row.append(await no_store(shape, 2 * slots_of(shape)))
        runs.append(row)
    return runs


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
    opts = parser.parse_args()
    for name in opts.scenarios:
        for scale in opts.scale:
            shape = Shape(**{**SHAPES[name].__dict__, "rollouts": SHAPES[name].rollouts * scale})
            summarize(shape, asyncio.run(scenario(shape, opts)))


if __name__ == "__main__":
    main()
