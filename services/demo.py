"""The main job on embedded defaults: a bus (the configured one, or an embedded one), then the whole
system in one process — coordinator, projector, an 8-slot runner with the calculator example agent —
on 100 rollouts, ending with the results read back by SQL.

Later issues make it train; for now the agent's "model" is a deterministic solver.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from voltbus.projections.follow import ends_at, project
from voltbus.projections.projector import Projector
from voltbus.schemas.errors import BusStartFailed, BusUnavailable, VoltbusError
from voltbus.schemas.resources import LLM, PromptTemplate
from voltbus.store import EnqueueRolloutRequest

from .coordinator.app import run as run_coordinator
from .eventlog import connect
from .natsserver import NatsServer
from .runner.app import Runner
from .settings import Settings

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "calc_agent"
SUMMARY = """
SELECT r.status, count(*) AS rollouts, round(avg(w.value), 2) AS mean_reward,
       (SELECT count(*) FROM spans) AS spans_total
FROM rollouts r LEFT JOIN rewards w USING (rollout_id)
GROUP BY r.status ORDER BY r.status
"""


async def _answers(settings: Settings) -> bool:
    probe = settings.nats.model_copy(update={"connect_timeout_s": 0.5})
    try:
        nc = await connect(probe, name="voltbus-probe")
    except BusUnavailable:
        return False
    await nc.close()
    return True


def start_embedded(settings: Settings, say: Callable[[str], None]) -> NatsServer:
    """Start the embedded bus on the configured port, or on a free one if that port is taken."""
    try:
        server = NatsServer(settings.bus, settings.nats.max_payload).start()
    except BusStartFailed as exc:
        if "in use" not in str(exc):
            raise
        say(f"{exc.reason.split(';')[0]}; using a free port instead")
        free = settings.bus.model_copy(update={"port": 0, "monitor_port": 0})
        server = NatsServer(free, settings.nats.max_payload).start()
    say(f"started an embedded NATS JetStream at {server.url} (store {settings.bus.data_dir})")
    return server


def load_tasks(repeats: int) -> list[dict[str, object]]:
    """The example's tasks, repeated."""
    path = EXAMPLE / "tasks.jsonl"
    if not path.is_file():
        raise VoltbusError(f"the demo needs the repository's examples/ folder ({path} not found)")
    tasks = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return tasks * repeats


async def _pipeline(settings: Settings, repeats: int, say: Callable[[str], None]) -> None:
    settings.nats.namespace = f"demo{uuid.uuid4().hex[:8]}"
    settings.runner = settings.runner.model_copy(update={"slots": 8, "claim_wait_s": 0.2, "heartbeat_s": 1.0})
    tasks = load_tasks(repeats)
    stop = asyncio.Event()
    coordinator = asyncio.create_task(run_coordinator(settings, stop))
    db = Path(tempfile.mkdtemp(prefix="voltbus-demo-")) / "demo.duckdb"
    async with Runner(settings, f"{EXAMPLE / 'agent.py'}:agent") as runner:
        assert runner.store is not None
        store = runner.store
        running = asyncio.create_task(runner.run(stop))
        await store.add_resources(
            {
                "main_llm": LLM(endpoint="http://127.0.0.1:8000/v1", model="calculator"),
                "prompt": PromptTemplate(template="Compute: {question}"),
            }
        )
        started = time.monotonic()
        rollouts = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=t, mode="train") for t in tasks])
        say(f"enqueued {len(rollouts)} rollouts in namespace {settings.nats.namespace}; runner with 8 slots working")
        done = await store.wait_for_rollouts(rollout_ids=[r.rollout_id for r in rollouts], timeout=300)
        took = time.monotonic() - started
        say(f"{len(done)} rollouts finished in {took:.1f}s ({len(done) / took:,.0f}/s)")
        stop.set()
        await running
        projector = Projector(db)
        try:
            await project(projector, store.log, ends=await ends_at(store.log))
            say(f"projected {projector.applied:,} events into {db}; by status, with rewards:")
            projector.con.sql(SUMMARY).show()
        finally:
            projector.close()
    await coordinator
    say(f'query it yourself: voltbus sql --db {db} "SELECT * FROM rollouts LIMIT 5"')


def run_demo(settings: Settings, repeats: int, say: Callable[[str], None]) -> None:
    """Run the pipeline on the bus at the configured URL, starting an embedded one if none answers."""
    server = None
    if asyncio.run(_answers(settings)):
        say(f"using the bus at {settings.nats.url}")
    else:
        server = start_embedded(settings, say)
        settings.nats.url = server.url
    try:
        asyncio.run(_pipeline(settings, repeats, say))
        say("demo finished: rollouts enqueued, claimed, run, traced and projected to SQL")
    finally:
        if server:
            server.stop()
