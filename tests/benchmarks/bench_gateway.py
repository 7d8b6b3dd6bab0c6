"""Gateway overhead next to calling the engine directly, with a fast stub engine (issue 6).

Run: ``python -m tests.benchmarks.bench_gateway`` (flags: ``--help``) or ``pytest -m bench tests/benchmarks``.

One nats-server started as voltbus runs it (:class:`NatsServer`, production :class:`BusSettings`),
the stub engine of the gateway tests (``tests/services/gateway/stub_llm.py``) served by uvicorn in
its own process, and the gateway in its own process (``python -m voltbus.services.gateway``,
configured by ``VOLTBUS_*`` environment as in production). A real rollout is started so the calls are
attributed and recorded (``ModelCalled`` on the spans stream).

The load generator is one ``httpx.AsyncClient`` with N concurrent tasks sending chat completions to
(a) the stub directly and (b) the gateway's Agent Lightning 0.3 route
``/rollout/{rid}/attempt/{aid}/v1/chat/completions``, not streamed and streamed (latency: until the
last byte). Each case runs ``--reps`` times per side, alternating which goes first; the table and the
ledger hold medians. ``ratio`` is gateway req/s / direct req/s; ``+p50`` / ``+p99`` are gateway minus
direct latencies. CPU ms/req is the CPU time the gateway (and the stub) process used per request.

Keys: by default the gateway has a key secret and each call carries its rollout's key, as under ``voltbus up``;
``--no-keys`` runs it open. Cases: ``gw_c<N>`` (not streamed) and ``gw_stream_c<N>`` (streamed) for N in
``--concurrency``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import uvicorn

from tests.benchmarks.bench_eventlog import (
    CSV_PATH,
    ROOT,
    Figure,
    Run,
    fmt,
    percentile,
    server_version,
    write_csv,
)
from tests.benchmarks.bench_runner import proc_cpu
from tests.services.gateway.stub_llm import StubControl, free_port, stub_app
from voltbus.services.keys import rollout_key
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.settings import BusSettings, NatsSettings
from voltbus.store import connect

MESSAGES = [{"role": "user", "content": "What is 2+2? Answer with one number."}]


@dataclass
class Options:
    """What to run; the defaults keep a whole run well under three minutes on two cores."""

    requests: int = 500
    concurrency: list[int] = field(default_factory=lambda: [1, 16, 64])
    reps: int = 3
    warmup: int = 100
    time_cap: float = 20.0
    stream: list[bool] = field(default_factory=lambda: [False, True])
    csv: Path | None = CSV_PATH
    profile: Path | None = None
    """Run the gateway under cProfile and write its stats here (slows the gateway several times)."""
    pin: bool = False
    """Give the gateway and nats-server a core of their own (the last one), the load generator and the stub
    the others: the gateway as deployed (a service beside the agents), not competing with the load."""
    keys: bool = True
    """Run the gateway as ``voltbus up`` and compose do, with a key secret: every call carries its rollout's key
    (``--no-keys``: an open gateway, as before issue 24)."""


@dataclass
class GwFigure(Figure):
    """A Figure (gateway as the voltbus side, direct as raw) plus CPU per request of the two servers."""

    gw_cpu_ms: float = 0.0
    stub_cpu_ms: float = 0.0

    @property
    def added_p50(self) -> float:
        return (self.p50_ms or 0.0) - (self.raw_p50_ms or 0.0)

    @property
    def added_p99(self) -> float:
        return (self.p99_ms or 0.0) - (self.raw_p99_ms or 0.0)


# ---------------------------------------------------------------- processes


def serve_stub(port: int) -> None:
    """Serve the stub engine on ``port`` until killed (the ``--serve-stub`` mode of this module)."""
    uvicorn.run(stub_app(StubControl()), host="127.0.0.1", port=port, log_level="warning", access_log=False)


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as err:
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


PROFILED = """
import cProfile, runpy, signal, sys
def stop(*_): raise SystemExit(0)
signal.signal(signal.SIGTERM, stop)
profiler = cProfile.Profile()
try:
    profiler.runcall(runpy.run_module, "voltbus.services.gateway", run_name="__main__")
except (SystemExit, KeyboardInterrupt):
    pass
finally:
    profiler.dump_stats(sys.argv[1])
"""
"""The gateway under cProfile: SIGTERM ends it through SystemExit so the stats are written."""


def pin(pid: int, cpus: set[int]) -> None:
    """Bind every thread of a process (present ones; later ones inherit it) to ``cpus``."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), cpus)


def pin_all(options: Options, server: NatsServer, stub: int, gateway: int, echo: Callable[[str], None]) -> None:
    """``Options.pin``: the gateway and nats-server on the last core, this process and the stub on the rest."""
    cpus = sorted(os.sched_getaffinity(0))
    if not options.pin or len(cpus) < 2:
        return
    own, rest = {cpus[-1]}, set(cpus[:-1])
    assert server.proc is not None
    for pid in (gateway, server.proc.pid):
        pin(pid, own)
    for pid in (stub, os.getpid()):
        pin(pid, rest)
    echo(f"pinned: gateway and nats-server on cpu {cpus[-1]}, load generator and stub on cpus {sorted(rest)}")


def tail(log: Path) -> str:
    """The end of a process's stderr log."""
    return log.read_text()[-3000:] if log.exists() else ""


async def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    deadline = time.perf_counter() + timeout
    async with httpx.AsyncClient() as http:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args} exited {proc.returncode}:\n{tail(log)}")
            try:
                await http.get(url, timeout=1.0)
                return
            except httpx.TransportError:
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"{url} did not answer in {timeout}s:\n{tail(log)}") from None
                await asyncio.sleep(0.05)


def stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


# ---------------------------------------------------------------- load


async def load(
    clients: Sequence[httpx.AsyncClient], url: str, n: int, tasks: int, stream: bool, deadline: float
) -> Run:
    """``n`` chat completions from ``tasks`` concurrent tasks, task i on ``clients[i]``; latency until the last
    byte. One client per task: a single shared client's connection pool costs more than the stub at 16+ tasks."""
    body = {"model": "stub", "messages": MESSAGES, "stream": stream, "max_tokens": 2}
    latencies: list[float] = []
    left = n

    async def worker(http: httpx.AsyncClient) -> None:
        nonlocal left
        while left > 0 and time.perf_counter() < deadline:
            left -= 1
            t = time.perf_counter()
            if stream:
                async with http.stream("POST", url, json=body) as resp:
                    data = b"".join([chunk async for chunk in resp.aiter_bytes()])
                assert resp.status_code == 200 and data.rstrip().endswith(b"[DONE]"), (resp.status_code, data[-200:])
            else:
                resp = await http.post(url, json=body)
                assert resp.status_code == 200, (resp.status_code, resp.text[:300])
                assert resp.json()["choices"][0]["message"]["content"] == "42"
            latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(worker(clients[i]) for i in range(tasks)))
    return Run(len(latencies), time.perf_counter() - start, latencies)


@dataclass
class Targets:
    direct: str
    gateway: str
    gw_pid: int
    stub_pid: int


async def case(http: Sequence[httpx.AsyncClient], t: Targets, o: Options, tasks: int, stream: bool) -> GwFigure:
    """``reps`` runs per side, alternating which side goes first; medians."""
    gws: list[Run] = []
    directs: list[Run] = []
    gw_cpu: list[float] = []
    stub_cpu: list[float] = []
    for rep in range(o.reps):
        order = ("direct", "gateway") if rep % 2 == 0 else ("gateway", "direct")
        for side in order:
            g0, s0 = proc_cpu(t.gw_pid), proc_cpu(t.stub_pid)
            url = t.direct if side == "direct" else t.gateway
            r = await load(http, url, o.requests, tasks, stream, time.perf_counter() + o.time_cap)
            g1, s1 = proc_cpu(t.gw_pid), proc_cpu(t.stub_pid)
            if side == "direct":
                directs.append(r)
            else:
                gws.append(r)
                gw_cpu.append((g1 - g0) * 1000 / max(1, r.events))
                stub_cpu.append((s1 - s0) * 1000 / max(1, r.events))

    def med(runs: list[Run], q: float) -> float:
        return statistics.median(percentile(r.latencies, q) for r in runs)

    name = f"gw_{'stream_' if stream else ''}c{tasks}{'_pinned' if o.pin else ''}"
    return GwFigure(
        case=name,
        events=int(statistics.median(r.events for r in gws)),
        rate=statistics.median(r.rate for r in gws),
        p50_ms=med(gws, 0.50),
        p99_ms=med(gws, 0.99),
        raw_rate=statistics.median(r.rate for r in directs),
        raw_p50_ms=med(directs, 0.50),
        raw_p99_ms=med(directs, 0.99),
        note=f"{'streamed' if stream else 'not streamed'}, {tasks} concurrent, AL 0.3 route vs stub directly",
        gw_cpu_ms=statistics.median(gw_cpu),
        stub_cpu_ms=statistics.median(stub_cpu),
    )


# ---------------------------------------------------------------- reporting


def table(figures: Sequence[GwFigure]) -> str:
    head = (
        f"{'case':<15} {'gw req/s':>9} {'p50 ms':>7} {'p99 ms':>7} | {'direct req/s':>12} {'p50 ms':>7} "
        f"{'p99 ms':>7} | {'+p50':>6} {'+p99':>6} {'ratio':>6} | {'CPU ms/req gw':>13} {'stub':>5}"
    )
    lines = [head, "-" * len(head)]
    for f in figures:
        lines.append(
            f"{f.case:<15} {f.rate:>9,.0f} {fmt(f.p50_ms):>7} {fmt(f.p99_ms):>7} | {f.raw_rate:>12,.0f} "
            f"{fmt(f.raw_p50_ms):>7} {fmt(f.raw_p99_ms):>7} | {f.added_p50:>6.2f} {f.added_p99:>6.2f} "
            f"{f.ratio:>6.0%} | {f.gw_cpu_ms:>13.2f} {f.stub_cpu_ms:>5.2f}"
        )
    return "\n".join(lines)


async def recorded(nats: NatsSettings, want: int, timeout: float = 20.0) -> int:
    """Messages on the namespace's spans stream, waiting up to ``timeout`` for ``want`` of them."""
    import nats as nats_py

    from voltbus.schemas.subjects import Topology

    nc = await nats_py.connect(nats.url)
    try:
        js = nc.jetstream()
        stream = Topology(namespace=nats.namespace).spans_stream
        deadline = time.perf_counter() + timeout
        while True:
            count = (await js.stream_info(stream)).state.messages
            if count >= want or time.perf_counter() > deadline:
                return count
            await asyncio.sleep(0.2)
    finally:
        await nc.drain()


SECRET = "bench-key-secret"
"""The gateway's key secret when ``Options.keys``."""


async def run(options: Options, data_dir: Path, echo: Callable[[str], None] = print) -> list[GwFigure]:
    """Start server, stub and gateway, run the cases, print the table, append to the ledger."""
    bus = BusSettings(data_dir=data_dir / "nats", port=0, monitor_port=0)
    server = NatsServer(bus, NatsSettings().max_payload).start()
    nats = NatsSettings(url=server.url, namespace=f"benchgw{os.getpid()}x{int(time.time()) % 100000}")
    procs: list[subprocess.Popen[bytes]] = []
    figures: list[GwFigure] = []
    try:
        stub_port, gw_port = free_port(), free_port()
        stub_log, gw_log = data_dir / "stub.log", data_dir / "gateway.log"
        stub = spawn(["-m", "tests.benchmarks.bench_gateway", "--serve-stub", str(stub_port)], {}, stub_log)
        procs.append(stub)
        store = await connect(settings=nats)  # creates the streams before the gateway connects
        try:
            rollout = await store.start_rollout({"question": "2+2"}, mode="train")
        finally:
            await store.close()
        engine = f"http://127.0.0.1:{stub_port}"
        profiled = ["-c", PROFILED, str(options.profile)] if options.profile else None
        gw = spawn(
            profiled or ["-m", "voltbus.services.gateway"],
            {
                "VOLTBUS_GATEWAY__UPSTREAM_URL": f"{engine}/v1",
                "VOLTBUS_GATEWAY__PORT": str(gw_port),
                "VOLTBUS_NATS__URL": nats.url,
                "VOLTBUS_NATS__NAMESPACE": nats.namespace,
                "VOLTBUS_LOG_LEVEL": "WARNING",
            }
            | ({"VOLTBUS_GATEWAY__KEY_SECRET": SECRET} if options.keys else {}),
            gw_log,
        )
        procs.append(gw)
        gateway = f"http://127.0.0.1:{gw_port}"
        await wait_http(f"{engine}/v1/models", stub, stub_log)
        await wait_http(f"{gateway}/healthz", gw, gw_log)
        echo(f"nats-server {server_version()} at {server.url}; stub pid {stub.pid}, gateway pid {gw.pid}")
        pin_all(options, server, stub.pid, gw.pid, echo)
        t = Targets(
            direct=f"{engine}/v1/chat/completions",
            gateway=f"{gateway}/rollout/{rollout.rollout_id}/attempt/{rollout.attempt.attempt_id}/v1/chat/completions",
            gw_pid=gw.pid,
            stub_pid=stub.pid,
        )
        top = max(options.concurrency)
        async with contextlib.AsyncExitStack() as clients:
            key = {"Authorization": f"Bearer {rollout_key(SECRET, rollout.rollout_id)}"} if options.keys else None
            http = [await clients.enter_async_context(httpx.AsyncClient(timeout=30.0, headers=key)) for _ in range(top)]
            gw_calls = 0
            for stream in (False, True):  # warm-up: connections, first stream writes, imports
                for url in (t.direct, t.gateway):
                    r = await load(http, url, options.warmup, min(8, top), stream, time.perf_counter() + 30)
                    gw_calls += r.events if url == t.gateway else 0
            for stream in options.stream:
                for tasks in options.concurrency:
                    began = time.perf_counter()
                    f = await case(http, t, options, tasks, stream)
                    figures.append(f)
                    gw_calls += f.events * options.reps  # approximate if the time cap cut a run
                    echo(
                        f"  {f.case}: {time.perf_counter() - began:.1f}s ratio {f.ratio:.0%}, "
                        f"+p50 {f.added_p50:.2f} ms, +p99 {f.added_p99:.2f} ms"
                    )
        got = await recorded(nats, gw_calls)
        echo(f"ModelCalled events recorded on the spans stream: {got} for ~{gw_calls} gateway calls")
        for p, log in ((stub, stub_log), (gw, gw_log)):
            if p.poll() is not None:
                raise RuntimeError(f"{p.args} exited {p.returncode}:\n{tail(log)}")
    finally:
        stop(procs)
        server.stop()
    echo(table(figures))
    if options.csv is not None:
        write_csv(options.csv, figures)
        echo(f"appended {len(figures)} rows to {options.csv}")
    return figures


def parse_args(argv: Sequence[str] | None = None) -> tuple[Options, int | None]:
    d = Options()
    p = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_gateway", description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=d.requests, help="requests per run (%(default)s)")
    p.add_argument("--concurrency", type=int, nargs="+", default=d.concurrency, help="concurrent tasks (1 16 64)")
    p.add_argument("--reps", type=int, default=d.reps, help="runs per side; medians are reported (%(default)s)")
    p.add_argument("--warmup", type=int, default=d.warmup, help="warm-up requests per side and mode (%(default)s)")
    p.add_argument("--time-cap", type=float, default=d.time_cap, help="seconds per timed run (%(default)s)")
    p.add_argument("--mode", choices=["both", "plain", "stream"], default="both", help="streamed, not, or both")
    p.add_argument("--csv", type=Path, default=d.csv, help="ledger to append to (%(default)s)")
    p.add_argument("--no-csv", action="store_true", help="do not append to the ledger")
    p.add_argument("--profile", type=Path, help="run the gateway under cProfile, stats to this file")
    p.add_argument("--pin", action="store_true", help="gateway and nats-server on a core of their own")
    p.add_argument("--no-keys", action="store_true", help="an open gateway (no key secret), as before issue 24")
    p.add_argument("--serve-stub", type=int, metavar="PORT", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    stream = {"both": [False, True], "plain": [False], "stream": [True]}[a.mode]
    opts = Options(
        requests=a.requests,
        concurrency=a.concurrency,
        reps=a.reps,
        warmup=a.warmup,
        time_cap=a.time_cap,
        stream=stream,
        csv=None if a.no_csv else a.csv,
        profile=a.profile,
        pin=a.pin,
        keys=not a.no_keys,
    )
    return opts, a.serve_stub


def main(argv: Sequence[str] | None = None) -> None:
    options, stub_port = parse_args(argv)
    if stub_port is not None:
        serve_stub(stub_port)
        return
    with tempfile.TemporaryDirectory(prefix="voltbus-bench-gw-") as tmp:
        asyncio.run(run(options, Path(tmp)))


if __name__ == "__main__":
    main()
