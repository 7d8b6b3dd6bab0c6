"""A synthetic log of N ended rollouts in a JetStream store dir, written as voltbus writes one; optionally projected.

Run: ``python -m tests.benchmarks.synthetic_log --rollouts 100000 --dir /tmp/synth [--project]`` (``--help``).

Each rollout is what a runner leaves of one AL store-benchmark rollout: ``enqueue_rollout``'s ``RolloutQueued``
(OCC: new aggregate), a runner's ``ClaimRollout(start=True)`` (``AttemptClaimed`` with the runner's key, OCC on the
rollout), one span flush (``--spans`` spans named as the agent's, a random attribute dict each, then a reward span
made by ``emit_reward``'s attributes, turned into ``SpanRecorded`` + ``RewardReported`` by the store's own
``events_of`` and packed into one ``SpanBatch`` per rollout by the event log's ``batched``) and the signed
``AttemptSucceeded`` (OCC). Events come from the lifecycle decider (``SigningDecider``); ids as the store makes them
(random hex). Control appends are pipelined (``Writer.append_many``), spans with ``publish_pipelined``.

What differs from a live run, and why it does not change what a reader later finds: the server runs without
``sync_interval: always`` while the log is built (``--fsync`` keeps it: the control path is then bound by one fsync
per append); no per-rollout span counter messages (nothing reads the counter of an ended rollout); the dispatch
consumer is made to start after the last message (as if runners had acked every queued message). ``--project``
then runs ``voltbus projector`` on it until both streams are applied, and reports the rate and its memory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from nats.js.api import ConsumerConfig, DeliverPolicy

from tests.benchmarks.bench_al_pattern import tree_rss
from tests.conftest import free_port
from voltbus.schemas import codec
from voltbus.schemas.commands import ClaimRollout, FinishAttempt, QueueRollout
from voltbus.schemas.spans import SpanStatus
from voltbus.schemas.subjects import subject_for
from voltbus.services.clients.store.base import ID_EPOCH, TIME_HEX
from voltbus.services.clients.store.spans import events_of
from voltbus.services.clients.store.types import Span
from voltbus.services.clients.telemetry.attributes import flatten_attributes, sanitize_attributes
from voltbus.services.clients.telemetry.semconv import AGL_ANNOTATION, LightningSpanAttributes
from voltbus.services.eventlog import EventLog
from voltbus.services.eventlog.append import Expectation, Message
from voltbus.services.eventlog.spans import batched, publish_pipelined
from voltbus.services.eventlog.streams import dispatch_config
from voltbus.services.lifecycle.authority import Holder
from voltbus.services.lifecycle.signing import SigningDecider
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.settings import BusSettings, NatsSettings

ROOT = Path(__file__).resolve().parents[2]
VOLTBUS = str(Path(sys.executable).with_name("voltbus"))
WORKERS = 16
"""Runner slots the rollouts are spread over (one signing key per slot)."""


def ordered_id(prefix: str, at: float, random_hex: str) -> str:
    """The store's id (``new_id``) for a rollout or attempt made at ``at``, its random part from the seeded rng."""
    return f"{prefix}-{int((at - ID_EPOCH) * 1000) % 16**TIME_HEX:0{TIME_HEX}x}{random_hex}"


def _hex(rng: random.Random, n: int) -> str:
    return rng.randbytes((n + 1) // 2).hex()[:n]


def spans_of(rng: random.Random, rollout_id: str, attempt_id: str, task: str, count: int, at: float) -> list[Span]:
    """One flush of the agent's spans: ``count`` spans under one root, each with a random attribute dict (one
    carries the task), then a reward span with ``emit_reward``'s attributes."""
    trace = _hex(rng, 32)
    root = _hex(rng, 16)
    spans, ok = [], SpanStatus(status_code="OK")
    for i in range(count):
        attributes = {_hex(rng, rng.randint(3, 20)): _hex(rng, rng.randint(5, 120)) for _ in range(rng.randint(2, 6))}
        if i == 1 % count:
            attributes["task"] = task
        spans.append(
            Span(
                rollout_id=rollout_id,
                attempt_id=attempt_id,
                sequence_id=i + 1,
                trace_id=trace,
                span_id=root if i == 0 else _hex(rng, 16),
                parent_id=None if i == 0 else root,
                name="agent0" if i == 0 else f"round0_{i}",
                attributes=attributes,
                start_time=at + 0.01 * i,
                end_time=at + 0.01 * (i + 1),
            )
        )
    reward = [{"name": "primary", "value": rng.uniform(1.0, 2.0)}]
    reward_attributes = sanitize_attributes(
        flatten_attributes({LightningSpanAttributes.REWARD.value: reward}, expand_leaf_lists=False)
    )
    spans.append(
        Span(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            sequence_id=count + 1,
            trace_id=trace,
            span_id=_hex(rng, 16),
            parent_id=None,
            name=AGL_ANNOTATION,
            status=ok,
            attributes=reward_attributes,
            start_time=at + 0.01 * count,
            end_time=at + 0.01 * count,
        )
    )
    return spans


class Builder:
    """Writes chunks of ended rollouts through one EventLog connection."""

    def __init__(self, log: EventLog, spans: int, seed: int) -> None:
        self.log, self.spans, self.rng = log, spans, random.Random(seed)
        self.deciders = [SigningDecider(Holder()) for _ in range(WORKERS)]
        self.events = {"control": 0, "spans": 0}
        self.messages = {"control": 0, "spans": 0}

    def _message(self, event: object) -> Message:
        return Message(subject_for(self.log.topology, event), codec.encode_checked(event), event.event_id)  # type: ignore[arg-type,attr-defined]

    async def _append(self, items: list[tuple[object, Expectation]]) -> list[int]:
        """Pipelined single-event appends with OCC; the sequence of each (all must land: a fresh log)."""
        results = await self.log.control.append_many([(self._message(e), x) for e, x in items])
        seqs = []
        for result in results:
            if not hasattr(result, "seq") or getattr(result, "already_applied", False):
                raise RuntimeError(f"append refused or duplicated: {result}")
            seqs.append(result.seq)
        self.events["control"] += len(items)
        self.messages["control"] += len(items)
        return seqs

    def _guarded(self, events: list[Any], seqs: list[int]) -> list[tuple[object, Expectation]]:
        """Each event with the OCC guard of its rollout at ``seq`` (0: a new one), as the store appends it."""
        topo = self.log.topology
        return [(e, Expectation(topo.rollout_any(e.rollout_id), s)) for e, s in zip(events, seqs, strict=True)]

    async def chunk(self, first: int, n: int, at: float) -> None:
        """Write rollouts ``first`` .. ``first + n - 1``: queued, claimed, their spans, succeeded."""
        rng = self.rng
        ids = [ordered_id("ro", at + k * 1e-3, _hex(rng, 10)) for k in range(n)]  # as new_id makes them
        deciders = [self.deciders[(first + k) % WORKERS] for k in range(n)]
        states, queued = [], []
        for k, rid in enumerate(ids):
            d = deciders[k]
            cmd = QueueRollout(rollout_id=rid, input=f"task-{first + k}", mode="train", at=at + k * 1e-3)
            (event,) = d.decide(cmd, d.initial_state())
            queued.append(event)
            states.append(d.evolve(d.initial_state(), event))
        seqs = await self._append(self._guarded(queued, [0] * n))
        claims = []
        for k, rid in enumerate(ids):
            d = deciders[k]
            cmd = ClaimRollout(
                rollout_id=rid,
                attempt_id=ordered_id("at", at + k * 1e-3, _hex(rng, 8)),
                dispatch_event_id=queued[k].event_id,
                worker_id=f"worker-{(first + k) % WORKERS}",
                at=at + 1 + k * 1e-3,
                start=True,
            )
            (event,) = d.decide(cmd, states[k])
            claims.append(event)
            states[k] = d.evolve(states[k], event)
        seqs = await self._append(self._guarded(claims, seqs))
        packs = []
        for k, rid in enumerate(ids):
            span_events = events_of(spans_of(rng, rid, claims[k].attempt_id, f"task-{first + k}", self.spans, at + 2))
            self.events["spans"] += len(span_events)
            packs += batched([self._message(e) for e in span_events], self.log.settings.span_batch_bytes)
        s = self.log.settings
        await publish_pipelined(self.log.nc, self.log.js, packs, s.span_window, s.request_timeout_s, s.publish_retries)
        self.messages["spans"] += len(packs)
        ends = []
        for k, rid in enumerate(ids):
            d = deciders[k]
            cmd = FinishAttempt(
                rollout_id=rid,
                attempt_id=claims[k].attempt_id,
                status="succeeded",
                worker_id=claims[k].worker_id,
                at=at + 3 + k * 1e-3,
            )
            ends += d.decide(cmd, states[k])
        await self._append(self._guarded(ends, seqs))

    async def after_all(self) -> int:
        """Make the dispatch consumer start after the last control message (as if every queued one was acked)."""
        settings, js = self.log.settings, self.log.js
        stream = self.log.topology.control_stream
        last = (await js.stream_info(stream)).state.last_seq
        wanted = dispatch_config(settings)
        await js.delete_consumer(stream, wanted.durable_name or "")
        wanted.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
        wanted.opt_start_seq = last + 1
        await js.add_consumer(stream, ConsumerConfig(**{**wanted.__dict__}))
        return last


async def build(url: str, rollouts: int, spans: int, chunk: int, seed: int) -> dict[str, object]:
    """Write ``rollouts`` ended rollouts to the bus at ``url``; what was written and how fast."""
    log = await EventLog.connect(NatsSettings(url=url), name="synthetic-log")
    builder = Builder(log, spans, seed)
    start, at = time.perf_counter(), time.time() - rollouts * 0.01 - 3600
    try:
        for first in range(0, rollouts, chunk):
            await builder.chunk(first, min(chunk, rollouts - first), at + first * 0.01)
            if (first // chunk) % 50 == 0:
                done = first + min(chunk, rollouts - first)
                print(f"  {done:,} rollouts, {done / (time.perf_counter() - start):,.0f}/s", flush=True)
        last = await builder.after_all()
    finally:
        await log.close()
    seconds = time.perf_counter() - start
    return {
        "rollouts": rollouts,
        "seconds": round(seconds, 1),
        "rollouts_per_s": round(rollouts / seconds),
        "events": builder.events,
        "messages": builder.messages,
        "events_per_s": round(sum(builder.events.values()) / seconds),
        "control_last_seq": last,
    }


async def finish(url: str) -> int:
    """The last step of a build cut short (its last chunk's rollouts may be left queued or running)."""
    log = await EventLog.connect(NatsSettings(url=url), name="synthetic-log")
    try:
        return await Builder(log, 0, 0).after_all()
    finally:
        await log.close()


def du(path: Path) -> int:
    """Bytes under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def project(url: str, directory: Path, timeout: float) -> dict[str, object]:
    """Run ``voltbus projector`` (shipped defaults) on the log until both streams are applied; rate and memory."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "VOLTBUS_NATS__URL": url,
        "VOLTBUS_PROJECTOR__PORT": str(port),
        "VOLTBUS_PROJECTOR__DB": str(directory / "projection.duckdb"),
    }
    with open(directory / "projector-build.log", "wb") as out:
        proc = subprocess.Popen([VOLTBUS, "projector"], env=env, stdout=out, stderr=out, cwd=ROOT)
    ends = asyncio.run(_stream_ends(url))
    start, health, peak = time.perf_counter(), {}, 0
    try:
        while time.perf_counter() - start < timeout:
            assert proc.poll() is None, f"the projector exited: see {directory / 'projector-build.log'}"
            peak = max(peak, tree_rss(proc.pid))
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    health = json.loads(r.read())
            except OSError:
                health = {}
            positions = health.get("positions", {})
            if all(positions.get(s, 0) >= n for s, n in ends.items()):
                break
            time.sleep(1.0)
        else:
            raise TimeoutError(f"not projected in {timeout} s: {health}")
        seconds = time.perf_counter() - start
        rss = tree_rss(proc.pid)
    finally:
        proc.terminate()
        proc.wait(120)
    return {
        "seconds": round(seconds, 1),
        "applied": health.get("applied"),
        "events_per_s": round((health.get("applied") or 0) / seconds),
        "rss_mib_after": round(rss / 2**20),
        "rss_mib_peak": round(peak / 2**20),
    }


async def _stream_ends(url: str) -> dict[str, int]:
    log = await EventLog.connect(NatsSettings(url=url), name="synthetic-log")
    try:
        topo = log.topology
        return {
            "control": (await log.js.stream_info(topo.control_stream)).state.last_seq,
            "spans": (await log.js.stream_info(topo.spans_stream)).state.last_seq,
        }
    finally:
        await log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, required=True, help="new directory: js/ (the store), projection.duckdb")
    parser.add_argument("--spans", type=int, default=3, help="agent spans per rollout (plus the reward span)")
    parser.add_argument("--chunk", type=int, default=2000, help="rollouts per pipelined round")
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--fsync", action="store_true", help="keep sync_interval: always while building")
    parser.add_argument("--project", action="store_true", help="then project it with voltbus projector")
    parser.add_argument("--project-timeout", type=float, default=6 * 3600)
    parser.add_argument(
        "--finish",
        action="store_true",
        help="a build cut short in --dir: only move the dispatch consumer (and project)",
    )
    opts = parser.parse_args()
    if not opts.finish and opts.dir.exists() and any(opts.dir.iterdir()):
        raise SystemExit(f"{opts.dir} is not empty")
    bus = BusSettings(data_dir=opts.dir / "js", port=0, sync_always=opts.fsync)
    server = NatsServer(bus, NatsSettings().max_payload).start()
    try:
        if opts.finish:
            built: dict[str, object] = {"control_last_seq": asyncio.run(finish(server.url))}
        else:
            built = asyncio.run(build(server.url, opts.rollouts, opts.spans, opts.chunk, opts.seed))
        built["store_mib"] = round(du(opts.dir / "js") / 2**20)
        print(json.dumps({"built": built}), flush=True)
        if opts.project:
            projected = project(server.url, opts.dir, opts.project_timeout)
            db = opts.dir / "projection.duckdb"
            files = (db, db.with_name(db.name + ".wal"))
            projected["db_mib"] = round(sum(p.stat().st_size for p in files if p.exists()) / 2**20)
            print(json.dumps({"projected": projected}), flush=True)
    finally:
        server.stop(60)


if __name__ == "__main__":
    main()
