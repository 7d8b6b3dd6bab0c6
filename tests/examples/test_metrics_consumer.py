"""examples/metrics_consumer: a FastStream consumer on a real nats-server reads what the event log appended
(both streams, an undecodable message included), keeps up with what is appended while it runs, resumes from
a sequence, and runs as the read-only ``dashboard`` user without one permission violation."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import msgspec
import pytest
from faststream.nats import TestNatsBroker

from tests.schemas.samples import SAMPLES
from voltbus.consumer import Item, log_broker, log_subscriber
from voltbus.schemas import derive_id
from voltbus.schemas.codec import AnyEvent
from voltbus.schemas.spans import Usage
from voltbus.services.eventlog import BadEvent, Envelope, EventLog
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.settings import NatsSettings

from ..conftest import wait_for
from ..security.test_bus_permissions import NS, admin_log, auth_dir, role_settings, secured_server, violations  # noqa: F401
from ..services.test_eventlog import queued

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "metrics_consumer"
COMMAND = "faststream run app:build_app --factory --app-dir examples/metrics_consumer"


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The example's run.py, imported as its README runs it (its folder on sys.path)."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.delitem(sys.modules, "app", raising=False)
    spec = importlib.util.spec_from_file_location("voltbus_example_metrics_run", EXAMPLE / "run.py")
    assert spec is not None and spec.loader is not None
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    yield run
    sys.modules.pop("app", None)


def ended(rid: str, how: str) -> AnyEvent:
    """The event that ends rollout ``rid`` as ``how`` says."""
    kind = {"succeeded": "AttemptSucceeded", "failed": "RolloutFailed", "cancelled": "RolloutCancelled"}[how]
    return msgspec.structs.replace(SAMPLES[kind], event_id=derive_id(rid, how), rollout_id=rid)  # type: ignore[type-var]


def telemetry(rid: str, reward: float, tokens: int) -> list[AnyEvent]:
    """A model call of ``tokens`` tokens and a reward for rollout ``rid``."""
    call = msgspec.structs.replace(
        SAMPLES["ModelCalled"], event_id=derive_id(rid, "call"), rollout_id=rid, usage=Usage(total_tokens=tokens)
    )
    value = msgspec.structs.replace(
        SAMPLES["RewardReported"], event_id=derive_id(rid, "r"), rollout_id=rid, value=reward
    )
    return [call, value]  # type: ignore[list-item]


async def history(log: EventLog, outcomes: dict[str, str]) -> None:
    """Each rollout queued, ended as ``outcomes`` says, with telemetry; and one undecodable message."""
    for rid, how in outcomes.items():
        await log.append([queued(rid)], expected_seq=0)
        await log.append([ended(rid, how)])
        await log.publish_spans(telemetry(rid, 1.0 if how == "succeeded" else 0.0, 100))
    await log.js.publish(log.topology.rollout_events("ro-garbage"), b"not an event")


async def test_run_reads_both_streams_to_their_end(eventlog: EventLog, example: ModuleType) -> None:
    await history(eventlog, {"r1": "succeeded", "r2": "succeeded", "r3": "failed", "r4": "cancelled"})
    metrics = await example.main(eventlog.settings)
    assert metrics == {
        "queued": 4,
        "succeeded": 2,
        "failed": 1,
        "cancelled": 1,
        "success_rate": 0.5,
        "mean_reward": 0.5,
        "tokens": 400,
        "undecodable": 1,
    }
    assert '"success_rate": 0.5' in (EXAMPLE / "README.md").read_text()


async def test_a_running_consumer_counts_what_is_appended_after_it_started(
    eventlog: EventLog, example: ModuleType
) -> None:
    await history(eventlog, {"r1": "succeeded"})
    metrics = example.Metrics()
    app = sys.modules["app"].build_app(eventlog.settings, metrics)
    async with TestNatsBroker(app.broker, with_real=True):
        await wait_for(lambda: metrics.queued == 1 and metrics.rewards == 1, what="the stored history")
        await history(eventlog, {"r2": "failed", "r3": "succeeded"})
        await wait_for(lambda: metrics.ended == {"succeeded": 2, "failed": 1, "cancelled": 0}, what="new ends")
        await wait_for(lambda: metrics.rewards == 3 and metrics.undecodable == 2, what="new rewards, garbage")
    assert metrics.snapshot()["mean_reward"] == round(2 / 3, 3) and metrics.positions == {"control": 8, "spans": 6}


async def test_the_readme_command_follows_the_log_until_stopped(eventlog: EventLog) -> None:
    assert f".venv/bin/{COMMAND}" in (EXAMPLE / "README.md").read_text()
    await history(eventlog, {"r1": "succeeded"})
    env = os.environ | {
        "VOLTBUS_NATS__URL": eventlog.settings.url,
        "VOLTBUS_NATS__NAMESPACE": eventlog.settings.namespace,
    }
    program, *args = COMMAND.split()
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / program), *args, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    output: list[str] = []

    async def until(line: str) -> None:
        while not any(line in seen for seen in output):
            out = await proc.stdout.readline()  # type: ignore[union-attr]
            assert out, f"the consumer exited before {line!r}: {''.join(output)}"
            output.append(out.decode())

    try:
        async with asyncio.timeout(60):
            await until("rollout r1 succeeded")
            await history(eventlog, {"r2": "failed"})
            await until("rollout r2 failed")
    finally:
        proc.terminate()
        await proc.wait()
    assert "'success_rate': 0.5" in output[-1] and "'undecodable': 1" in output[-1]


async def test_a_subscriber_resumes_from_a_sequence_in_order(eventlog: EventLog) -> None:
    for i in range(6):
        await eventlog.append([queued(f"r{i}")], expected_seq=0)
    await eventlog.js.publish(eventlog.topology.rollout_events("ro-garbage"), b"{}")
    seen: list[Item] = []
    broker = log_broker(eventlog.settings)

    @log_subscriber(broker, "control", eventlog.settings, from_seq=4)
    async def handle(item: Item) -> None:
        seen.append(item)

    async with TestNatsBroker(broker, with_real=True):
        await wait_for(lambda: len(seen) == 4, what="sequences 4 to 7")
    assert [i.seq for i in seen] == [4, 5, 6, 7]
    assert all(isinstance(i, Envelope) and i.event.rollout_id == f"r{i.seq - 1}" for i in seen[:3])  # type: ignore[union-attr]
    assert isinstance(seen[3], BadEvent) and seen[3].subject == eventlog.topology.rollout_events("ro-garbage")


async def test_the_read_only_dashboard_user_runs_it_without_a_permission_violation(
    secured_server: NatsServer,  # noqa: F811
    auth_dir: Path,  # noqa: F811
    admin_log: EventLog,  # noqa: F811
    example: ModuleType,
) -> None:
    await history(admin_log, {"ro-dash-1": "succeeded", "ro-dash-2": "failed"})
    before = len(violations(secured_server))
    settings: NatsSettings = role_settings(secured_server, auth_dir, "dashboard")
    assert settings.namespace == NS and settings.user == "dashboard"
    metrics = await example.main(settings)
    assert metrics["queued"] >= 2 and metrics["failed"] >= 1 and metrics["undecodable"] >= 1
    assert violations(secured_server, before) == []
