"""Control plane throughput (enqueue, claim, complete) next to raw nats-py, on one nats-server run as voltbus runs it.

Run: ``python -m tests.benchmarks.bench_control`` (flags: ``--help``) or ``pytest -m bench tests/benchmarks``.

The server, the alternation of sides, the medians, the table and the ledger are those of
``bench_eventlog`` (imported from it). Every run gets fresh streams and a fresh dispatch consumer.
A runner is its own connection: a ``voltbus.store`` Store, or a raw nats-py client.

Cases:
  enqueue            Store.enqueue_many_rollouts in batches        vs  publish_async windows of the same RolloutQueued
                                                                       bytes and headers (msg id, OCC expected 0)
  claim_c<N>         N runners loop dequeue_rollout() until empty  vs  N raw workers: pull fetch(1) + direct get of the
                                                                       rollout head + OCC publish AttemptClaimed + ack
  complete_c<N>      N runners loop dequeue_rollout() +            vs  the same raw claim + OCC publish AttemptSucceeded
                     update_attempt(status="succeeded")
  rtt                diagnostic, printed only: the median cost of each round trip and step of a claim + success
  complete_c<N>_wk   the same with worker_id=f"w{i}" (worker       vs  the raw complete plus, after the claim and after
                     status snapshots are written)                     the success, a direct get of the worker's last
                                                                       snapshot + an OCC publish of a new one

Rates are rollouts per second; a claim's latency is one dequeue_rollout call that returned a rollout
(raw: fetch + get + publish + ack). The queue is filled before timing. A runner stops at its first
empty dequeue, which waits ``dequeue_wait_s`` on both sides.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import nats
import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import Header
from nats.js.errors import NotFoundError

from tests.benchmarks.bench_eventlog import (
    CSV_PATH,
    Bench,
    Figure,
    RawMessage,
    Run,
    alternate,
    percentile,
    raw_append_seq,
    raw_messages,
    raw_windows,
    server_version,
    stored,
    summarize,
    table,
    write_csv,
)
from voltbus.schemas import codec, derive_id
from voltbus.schemas.codec import AnyEvent
from voltbus.schemas.commands import FinishAttempt, QueueRollout
from voltbus.schemas.rollouts import AttemptClaimed, AttemptSucceeded
from voltbus.schemas.subjects import Topology
from voltbus.schemas.workers import WorkerStatusReported
from voltbus.services.clients.store.base import new_id
from voltbus.services.clients.store.views import to_json
from voltbus.services.eventlog.append import EXPECTED_SUBJECT
from voltbus.services.lifecycle import decider
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.settings import BusSettings, NatsSettings
from voltbus.store import EnqueueRolloutRequest, Store, connect

ENQUEUE_CHUNK = 500
"""Rollouts per enqueue_many_rollouts call when filling a queue (untimed)."""


@dataclass
class Options:
    """What to run; the defaults keep a whole run under about three minutes on two cores."""

    enqueue: int = 2000
    batch: int = 500
    rollouts: int = 1000
    runners: list[int] = field(default_factory=lambda: [1, 8, 32])
    worker_runners: list[int] = field(default_factory=lambda: [1, 8, 32])
    reps: int = 3
    time_cap: float = 30.0
    cases: list[str] = field(default_factory=lambda: list(CASES))
    csv: Path | None = CSV_PATH


@dataclass
class CtlRun(Run):
    """A timed run plus the messages the runners' connections sent and received (all of them)."""

    out_msgs: int = 0
    in_msgs: int = 0


def task(i: int) -> dict[str, object]:
    """A small, realistic rollout input."""
    return {"question": f"What is {i} * 7 + 3?", "answer": i * 7 + 3, "source": "bench"}


def requests(n: int) -> list[EnqueueRolloutRequest]:
    return [EnqueueRolloutRequest(input=task(i)) for i in range(n)]


def queued_events(n: int) -> list[AnyEvent]:
    """RolloutQueued events built as ``enqueue_many_rollouts`` builds them (before timing)."""
    now = time.time()
    cmds = [QueueRollout(rollout_id=new_id("ro", 10), input=to_json(task(i)), at=now) for i in range(n)]
    return [decider.decide(c, decider.initial_state())[0] for c in cmds]


def traffic(clients: Sequence[Client]) -> tuple[int, int]:
    return sum(c.stats["out_msgs"] for c in clients), sum(c.stats["in_msgs"] for c in clients)


# ---------------------------------------------------------------- enqueue


async def vb_enqueue(b: Bench, n: int, batch: int) -> CtlRun:
    store = await connect(settings=b.settings(), name="bench-store")
    try:
        reqs = requests(n)
        done, deadline = 0, b.deadline()
        out0, in0 = traffic([store.log.nc])
        start = time.perf_counter()
        for i in range(0, n, batch):
            done += len(await store.enqueue_many_rollouts(reqs[i : i + batch]))
            if time.perf_counter() > deadline:
                break
        seconds = time.perf_counter() - start
        out1, in1 = traffic([store.log.nc])
        assert await stored(store.log.js, store.topology.control_stream) == done
        return CtlRun(done, seconds, out_msgs=out1 - out0, in_msgs=in1 - in0)
    finally:
        await store.close()


async def raw_enqueue(b: Bench, n: int, batch: int) -> CtlRun:
    nc, js, settings = await b.raw()
    try:
        topo = Topology(namespace=settings.namespace)
        messages = raw_messages(topo, queued_events(n), occ=True)
        out0, in0 = traffic([nc])
        start = time.perf_counter()
        done = await raw_windows(js, messages, batch, b.deadline())
        seconds = time.perf_counter() - start
        out1, in1 = traffic([nc])
        assert await stored(js, topo.control_stream) == done
        return CtlRun(done, seconds, out_msgs=out1 - out0, in_msgs=in1 - in0)
    finally:
        await nc.drain()


# ---------------------------------------------------------------- claim and complete: voltbus


async def fill(store: Store, n: int) -> list[str]:
    """Queue ``n`` rollouts (untimed); return their ids."""
    ids: list[str] = []
    reqs = requests(n)
    for i in range(0, n, ENQUEUE_CHUNK):
        ids += [r.rollout_id for r in await store.enqueue_many_rollouts(reqs[i : i + ENQUEUE_CHUNK])]
    return ids


async def vb_runner(store: Store, worker_id: str | None, finish: bool, latencies: list[float], deadline: float) -> int:
    done = 0
    while time.perf_counter() < deadline:
        t = time.perf_counter()
        claimed = await store.dequeue_rollout(worker_id=worker_id)
        if claimed is None:
            break
        latencies.append(time.perf_counter() - t)
        if finish:
            await store.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")
        done += 1
    return done


async def vb_claims(b: Bench, n: int, runners: int, finish: bool, workers: bool) -> CtlRun:
    settings = b.settings()
    stores = [await connect(settings=settings, name=f"bench-runner-{i}") for i in range(runners)]
    try:
        await fill(stores[0], n)
        latencies: list[float] = []
        deadline = b.deadline()
        clients = [s.log.nc for s in stores]
        out0, in0 = traffic(clients)
        start = time.perf_counter()
        counts = await asyncio.gather(
            *(vb_runner(s, f"w{i}" if workers else None, finish, latencies, deadline) for i, s in enumerate(stores))
        )
        seconds = time.perf_counter() - start
        out1, in1 = traffic(clients)
        done = sum(counts)
        assert done == n or seconds >= b.options.time_cap, (done, n)
        return CtlRun(done, seconds, latencies, out_msgs=out1 - out0, in_msgs=in1 - in0)
    finally:
        for s in stores:
            await s.close()


# ---------------------------------------------------------------- claim and complete: raw nats-py


@dataclass
class Prepared:
    """A rollout's claim and success, encoded before timing (raw side)."""

    claim: RawMessage
    success: RawMessage


def prepare(topo: Topology, rollout_ids: Sequence[str]) -> dict[str, Prepared]:
    now = time.time()
    claims, successes = [], []
    for rid in rollout_ids:
        aid = new_id("at", 8)
        claims.append(
            AttemptClaimed(
                event_id=derive_id(rid, aid, "claimed"), rollout_id=rid, attempt_id=aid, sequence_id=1, at=now
            )
        )
        successes.append(
            AttemptSucceeded(event_id=derive_id(rid, aid, "succeeded"), rollout_id=rid, attempt_id=aid, at=now)
        )
    pairs = zip(raw_messages(topo, claims, occ=False), raw_messages(topo, successes, occ=False), strict=True)
    return {rid: Prepared(c, s) for rid, (c, s) in zip(rollout_ids, pairs, strict=True)}


class RawWorker:
    """What a claim (+ success) needs from the bus, with nothing of voltbus in between."""

    def __init__(self, nc: Client, topo: Topology, settings: NatsSettings, worker_id: str | None) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream(timeout=settings.request_timeout_s)
        self.topo = topo
        self.timeout = settings.request_timeout_s
        self.wait = settings.dequeue_wait_s
        self.worker_id = worker_id
        if worker_id:
            self.worker_subject = topo.worker(worker_id)
            snapshot = WorkerStatusReported(event_id="x", worker_id=worker_id, status="busy", at=time.time())
            self.worker_data = codec.encode(snapshot)

    async def occ_publish(self, m: RawMessage, scope: str, expected: int, msg_id: str | None = None) -> int:
        headers = {
            Header.MSG_ID.value: msg_id or m.headers[Header.MSG_ID.value],
            Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(expected),
            EXPECTED_SUBJECT: scope,
        }
        ack = await self.js.publish(m.subject, m.data, timeout=self.timeout, headers=headers)
        assert not ack.duplicate
        return ack.seq

    async def head(self, scope: str) -> int:
        try:
            return (await self.js.get_last_msg(self.topo.control_stream, scope, direct=True)).seq
        except NotFoundError:
            return 0

    async def report(self, rollout_id: str, phase: str) -> None:
        """A worker snapshot write: read the last one, append the next with OCC on the worker subject."""
        seq = await self.head(self.worker_subject)
        m = RawMessage(self.worker_subject, self.worker_data, {})
        await self.occ_publish(m, self.worker_subject, seq, derive_id(self.worker_subject, rollout_id, phase))

    async def loop(self, prepared: dict[str, Prepared], finish: bool, latencies: list[float], deadline: float) -> int:
        sub = await self.js.pull_subscribe_bind(self.topo.dispatch_consumer, self.topo.control_stream)
        done = 0
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            try:
                msg = (await sub.fetch(1, timeout=self.wait))[0]
            except nats.errors.TimeoutError:
                break
            rid = msg.subject.split(".")[2]
            scope = self.topo.rollout_any(rid)
            p = prepared[rid]
            seq = await self.occ_publish(p.claim, scope, await self.head(scope))
            await msg.ack()
            if self.worker_id:
                await self.report(rid, "busy")
            latencies.append(time.perf_counter() - t)
            if finish:
                await self.occ_publish(p.success, scope, seq)
                if self.worker_id:
                    await self.report(rid, "idle")
            done += 1
        await sub.unsubscribe()
        return done


async def raw_claims(b: Bench, n: int, runners: int, finish: bool, workers: bool) -> CtlRun:
    settings = b.settings()
    filler = await connect(settings=settings, name="bench-raw-fill")  # untimed: queue with the store, then leave
    try:
        ids = await fill(filler, n)
    finally:
        await filler.close()
    topo = Topology(namespace=settings.namespace)
    prepared = prepare(topo, ids)
    clients = [await nats.connect(settings.url, name=f"bench-raw-{i}") for i in range(runners)]
    try:
        raws = [RawWorker(nc, topo, settings, f"w{i}" if workers else None) for i, nc in enumerate(clients)]
        latencies: list[float] = []
        deadline = b.deadline()
        out0, in0 = traffic(clients)
        start = time.perf_counter()
        counts = await asyncio.gather(*(w.loop(prepared, finish, latencies, deadline) for w in raws))
        seconds = time.perf_counter() - start
        out1, in1 = traffic(clients)
        done = sum(counts)
        assert done == n or seconds >= b.options.time_cap, (done, n)
        return CtlRun(done, seconds, latencies, out_msgs=out1 - out0, in_msgs=in1 - in0)
    finally:
        for nc in clients:
            await nc.drain()


# ---------------------------------------------------------------- cases


def per_rollout(runs: list[Run]) -> str:
    """Median messages sent / received per rollout by the runners' connections."""
    out = statistics.median(r.out_msgs / max(1, r.events) for r in runs)  # type: ignore[attr-defined]
    got = statistics.median(r.in_msgs / max(1, r.events) for r in runs)  # type: ignore[attr-defined]
    return f"{out:.1f}/{got:.1f}"


def figure(case: str, vbs: list[Run], raws: list[Run], note: str) -> Figure:
    return summarize(
        case, vbs, raws, f"{note}; msgs out/in per rollout: vb {per_rollout(vbs)}, raw {per_rollout(raws)}"
    )


async def case_enqueue(b: Bench) -> list[Figure]:
    o: Options = b.options  # type: ignore[assignment]
    n, batch = o.enqueue, o.batch
    vbs, raws = await alternate(b, lambda: vb_enqueue(b, n, batch), lambda: raw_enqueue(b, n, batch))
    size = len(codec.encode(queued_events(1)[0]))
    return [figure("enqueue", vbs, raws, f"{size} B RolloutQueued, batches of {batch}")]


async def claim_cases(b: Bench, finish: bool, workers: bool) -> list[Figure]:
    o: Options = b.options  # type: ignore[assignment]
    figures = []
    for runners in o.worker_runners if workers else o.runners:
        vbs, raws = await alternate(
            b,
            lambda r=runners: vb_claims(b, o.rollouts, r, finish, workers),
            lambda r=runners: raw_claims(b, o.rollouts, r, finish, workers),
        )
        what = "dequeue_rollout + update_attempt(succeeded)" if finish else "dequeue_rollout"
        name = f"{'complete' if finish else 'claim'}_c{runners}{'_wk' if workers else ''}"
        who = "with worker_id" if workers else "no worker_id"
        figures.append(figure(name, vbs, raws, f"{runners} runners, {what}, {who}"))
    return figures


async def case_claim(b: Bench) -> list[Figure]:
    return await claim_cases(b, finish=False, workers=False)


async def case_complete(b: Bench) -> list[Figure]:
    return await claim_cases(b, finish=True, workers=False)


async def case_complete_wk(b: Bench) -> list[Figure]:
    return await claim_cases(b, finish=True, workers=True)


async def case_rtt(b: Bench, n: int = 300) -> list[Figure]:
    """Diagnostic (printed, not in the ledger): the median cost of each step of a claim + success,
    timed one at a time on one connection over ``n`` rollouts."""
    store = await connect(settings=b.settings(), name="bench-rtt")
    js, topo, log = store.log.js, store.topology, store.log
    steps: dict[str, list[float]] = {k: [] for k in RTT_STEPS}

    async def timed(step: str, op: Awaitable[object]) -> object:
        t = time.perf_counter()
        try:
            return await op
        finally:  # a 404 (NotFoundError) is a completed round trip too
            steps[step].append(time.perf_counter() - t)

    try:
        prepared = prepare(topo, await fill(store, n))
        sub = await js.pull_subscribe_bind(topo.dispatch_consumer, topo.control_stream)
        stream, wait = topo.control_stream, store.settings.dequeue_wait_s
        for _ in range(n):
            msg = (await timed("fetch", sub.fetch(1, timeout=wait)))[0]  # type: ignore[index]
            await timed("ack", msg.ack())
            rid = msg.subject.split(".")[2]
            scope, p = topo.rollout_any(rid), prepared[rid]
            found = await timed("get_next", js.get_msg(stream, seq=1, subject=scope, direct=True, next=True))
            with contextlib.suppress(NotFoundError):
                await timed("get_miss", js.get_msg(stream, seq=found.seq + 1, subject=scope, direct=True, next=True))  # type: ignore[attr-defined]
            await timed("get_last", js.get_last_msg(stream, scope, direct=True))
            await timed("load_1", log.load(decider, rid))
            headers = {
                Header.MSG_ID.value: p.claim.headers[Header.MSG_ID.value],
                Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(found.seq),  # type: ignore[attr-defined]
                EXPECTED_SUBJECT: scope,
            }
            await timed("occ_publish", js.publish(p.claim.subject, p.claim.data, headers=headers))
            await timed("load_2", log.load(decider, rid))
            attempt_id = msgspec.json.decode(p.claim.data)["attempt_id"]
            finish = FinishAttempt(rollout_id=rid, attempt_id=attempt_id, status="succeeded", at=time.time())
            await timed("transact", log.transact(decider, rid, finish))
    finally:
        await store.close()
    echo = print
    echo(f"  round trips, one at a time, {n} rollouts (median, p99 in ms):")
    for step, values in steps.items():
        echo(f"    {step:<12} {percentile(values, 0.5):6.3f} {percentile(values, 0.99):6.3f}  {RTT_STEPS[step]}")
    return []


RTT_STEPS = {
    "fetch": "pull fetch(1) of the dispatch consumer (message waiting)",
    "ack": "msg.ack() (a publish, no reply awaited)",
    "get_next": "direct get, next message on ro.<id>.* (found)",
    "get_miss": "direct get past the last message (404: how read() learns it is done)",
    "get_last": "direct get of the last message on ro.<id>.* (the raw side's head read)",
    "load_1": "EventLog.load of a 1-event rollout (2 gets + decode + fold)",
    "occ_publish": "js.publish AttemptClaimed with msg id + OCC headers (fsync)",
    "load_2": "EventLog.load of a 2-event rollout (3 gets + decode + fold)",
    "transact": "EventLog.transact(FinishAttempt) on it (load_2 + decide + OCC publish)",
}


CASES: dict[str, Callable[[Bench], Awaitable[list[Figure]]]] = {
    "enqueue": case_enqueue,
    "claim": case_claim,
    "complete": case_complete,
    "complete_wk": case_complete_wk,
    "rtt": case_rtt,
}


async def run(options: Options, data_dir: Path, echo: Callable[[str], None] = print) -> list[Figure]:
    """Start the server, run the cases, print the table, append to the ledger; return the figures."""
    bus = BusSettings(data_dir=data_dir, port=0, monitor_port=0)
    server = NatsServer(bus, NatsSettings().max_payload).start()
    echo(f"nats-server {server_version()} at {server.url}, sync_interval: always={bus.sync_always}, store {data_dir}")
    figures: list[Figure] = []
    try:
        b = Bench(server, options)  # type: ignore[arg-type]
        await raw_append_seq(b, 200, 1)  # warm-up: first stream files, connections
        for name in options.cases:
            t = time.perf_counter()
            got = await CASES[name](b)
            figures += got
            echo(f"  {name}: {time.perf_counter() - t:.1f}s " + ", ".join(f"{f.case} {f.ratio:.0%}" for f in got))
    finally:
        server.stop()
    echo("rates are rollouts/s; latencies are per claim (one dequeue_rollout that returned a rollout)")
    head, body = table(figures).split("\n", 1)
    echo(head.replace("ev/s", "ro/s") + "\n" + body)
    if options.csv is not None:
        write_csv(options.csv, figures)
        echo(f"appended {len(figures)} rows to {options.csv}")
    return figures


def parse_args(argv: Sequence[str] | None = None) -> Options:
    d = Options()
    p = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_control", description=__doc__.split("\n")[0])
    p.add_argument("--enqueue", type=int, default=d.enqueue, help="rollouts in the enqueue case (%(default)s)")
    p.add_argument("--batch", type=int, default=d.batch, help="rollouts per enqueue_many_rollouts call (%(default)s)")
    p.add_argument("--rollouts", type=int, default=d.rollouts, help="rollouts per claim/complete run (%(default)s)")
    p.add_argument("--runners", type=int, nargs="+", default=d.runners, help="runner counts (%(default)s)")
    p.add_argument(
        "--worker-runners", type=int, nargs="+", default=d.worker_runners, help="runner counts, with worker_id"
    )
    p.add_argument("--reps", type=int, default=d.reps, help="repetitions; medians are reported (%(default)s)")
    p.add_argument("--time-cap", type=float, default=d.time_cap, help="seconds per timed run (%(default)s)")
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=d.cases, help="cases to run (all)")
    p.add_argument("--csv", type=Path, default=d.csv, help="ledger to append to (%(default)s)")
    p.add_argument("--no-csv", action="store_true", help="do not append to the ledger")
    a = p.parse_args(argv)
    return Options(
        enqueue=a.enqueue,
        batch=a.batch,
        rollouts=a.rollouts,
        runners=a.runners,
        worker_runners=a.worker_runners,
        reps=a.reps,
        time_cap=a.time_cap,
        cases=a.cases,
        csv=None if a.no_csv else a.csv,
    )


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="voltbus-bench-") as tmp:
        asyncio.run(run(options, Path(tmp)))


if __name__ == "__main__":
    main()
