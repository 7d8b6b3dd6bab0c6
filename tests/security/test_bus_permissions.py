"""Per-role bus permissions on a real nats-server started with ``voltbus nats auth init``'s config.

Each forbidden action is refused by the server (a permissions violation, nothing stored), wrong or
missing credentials are refused at connect, and every role does its real job with its own user.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import nats
import pytest

from voltbus.schemas.errors import BusAuthRefused, PermissionDenied, PublishFailed
from voltbus.schemas.gateway import GatewayPaused
from voltbus.schemas.resources import ResourcesPublished
from voltbus.schemas.rollouts import AttemptSucceeded, AttemptTimedOut, RolloutCancelled, RolloutQueued
from voltbus.schemas.spans import RewardReported
from voltbus.schemas.subjects import Topology
from voltbus.schemas.training import RunStarted
from voltbus.services.eventlog import EventLog
from voltbus.services.eventlog.connection import connect, credentials
from voltbus.services.ops.natsauth import ROLES, init_auth, read_credentials
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.settings import BusSettings, NatsSettings

from ..conftest import wait_for

NS = "sec"


@pytest.fixture(scope="module")
def auth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Credentials for every role (bcrypt cost 4: a connection is checked in about a millisecond)."""
    out = tmp_path_factory.mktemp("auth")
    init_auth(out, Topology(namespace=NS), rounds=4)
    return out


@pytest.fixture(scope="module")
def secured_server(tmp_path_factory: pytest.TempPathFactory, auth_dir: Path) -> Iterator[NatsServer]:
    """A nats-server that requires the generated users and enforces their permissions."""
    bus = BusSettings(data_dir=tmp_path_factory.mktemp("nats-auth"), port=0, monitor_port=0, auth_dir=auth_dir)
    server = NatsServer(bus, max_payload=1024 * 1024).start()
    yield server
    server.stop()


def role_settings(server: NatsServer, auth_dir: Path, role: str) -> NatsSettings:
    """Client settings of one role, from its env file; failures are quick (no publish retries)."""
    env = read_credentials(auth_dir, role)
    return NatsSettings(
        url=server.url,
        namespace=NS,
        user=env["VOLTBUS_NATS__USER"],
        password=env["VOLTBUS_NATS__PASSWORD"],
        request_timeout_s=0.5,
        connect_timeout_s=1.0,
        publish_retries=0,
    )


@pytest.fixture
async def admin_log(secured_server: NatsServer, auth_dir: Path) -> AsyncIterator[EventLog]:
    """The admin's EventLog (it creates the streams) for checking what was stored."""
    log = await EventLog.connect(role_settings(secured_server, auth_dir, "admin"))
    yield log
    await log.close()


def violations(server: NatsServer, since: int = 0) -> list[str]:
    """The server's permission violation lines (after the first ``since`` of them)."""
    return [line for line in server.tail if "Violation" in line][since:]


async def stored_count(admin: EventLog, subject: str) -> int:
    """How many messages of ``subject`` the streams hold."""
    total = 0
    for stream in (admin.topology.control_stream, admin.topology.spans_stream):
        info = await admin.js.stream_info(stream, subjects_filter=subject)
        total += sum((info.state.subjects or {}).values())
    return total


def queued(rollout_id: str) -> RolloutQueued:
    return RolloutQueued(event_id=f"q-{rollout_id}", rollout_id=rollout_id, input={"x": 1}, queued_at=time.time())


FORBIDDEN = [
    ("projector", RolloutQueued, "projector enqueues a rollout"),
    ("projector", RewardReported, "projector writes a reward"),
    ("dashboard", RolloutQueued, "dashboard enqueues a rollout"),
    ("inference", ResourcesPublished, "inference publishes a resources version"),
    ("runner", ResourcesPublished, "runner publishes a resources version"),
    ("runner", RunStarted, "runner writes a training-run event"),
    ("runner", AttemptTimedOut, "runner times out an attempt (an end by authority)"),
    ("runner", RolloutCancelled, "runner cancels a rollout (an end by authority)"),
    ("gateway", AttemptSucceeded, "gateway ends an attempt"),
    ("gateway", ResourcesPublished, "gateway publishes a resources version"),
    ("coordinator", ResourcesPublished, "coordinator publishes a resources version"),
    ("storeserver", RunStarted, "store server writes a training-run event"),
    ("storeserver", GatewayPaused, "store server pauses a gateway"),
]


def forbidden_event(kind: type, n: int) -> object:
    rid, now = f"forbidden-{n}", time.time()
    return {
        RolloutQueued: lambda: queued(rid),
        RewardReported: lambda: RewardReported(event_id=rid, rollout_id=rid, attempt_id="a", value=1.0, at=now),
        ResourcesPublished: lambda: ResourcesPublished(
            event_id=rid, name="main", resources_id=rid, version=1, resources={}, created_at=now
        ),
        RunStarted: lambda: RunStarted(event_id=rid, run_id=rid, algorithm="grpo", config={}, at=now),
        AttemptSucceeded: lambda: AttemptSucceeded(event_id=rid, rollout_id=rid, attempt_id="a", at=now),
        AttemptTimedOut: lambda: AttemptTimedOut(event_id=rid, rollout_id=rid, attempt_id="a", at=now),
        RolloutCancelled: lambda: RolloutCancelled(event_id=rid, rollout_id=rid, at=now),
        GatewayPaused: lambda: GatewayPaused(event_id=rid, gateway_id=rid, retry_after_s=1, inflight=0, at=now),
    }[kind]()


@pytest.mark.parametrize(("n", "role", "kind"), [(n, r, k) for n, (r, k, _) in enumerate(FORBIDDEN)],
                         ids=[why for _, _, why in FORBIDDEN])  # fmt: skip
async def test_forbidden_publish_is_refused_by_the_server(
    secured_server: NatsServer, auth_dir: Path, admin_log: EventLog, caplog: pytest.LogCaptureFixture,
    n: int, role: str, kind: type,
) -> None:  # fmt: skip
    event = forbidden_event(kind, n)
    subject = admin_log._message(event).subject  # type: ignore[arg-type]
    log = await EventLog.connect(role_settings(secured_server, auth_dir, role), name=f"test-{role}")
    try:
        with caplog.at_level(logging.WARNING), pytest.raises(PermissionDenied) as refused:
            if isinstance(event, RewardReported):
                await log.publish_spans([event])
            else:
                await log.append([event])  # type: ignore[list-item]
    finally:
        await log.close()
    assert (refused.value.user, refused.value.subject, refused.value.event_ids) == (role, subject, [event.event_id])
    assert isinstance(refused.value, PublishFailed)  # callers that catch PublishFailed still see it
    line = f'user:{role}" - Publish Violation - Subject "{subject}"'
    # the server's log is read by a thread: under load the line may come after the client's refusal
    await wait_for(lambda: any(line in seen for seen in violations(secured_server)), 30, "the violation logged")
    assert await stored_count(admin_log, subject) == 0


async def raw_client(server: NatsServer, auth_dir: Path, role: str, errors: list[str]) -> nats.NATS:
    async def on_error(exc: Exception) -> None:
        errors.append(str(exc).lower())

    settings = role_settings(server, auth_dir, role)
    return await nats.connect(server.url, error_cb=on_error, allow_reconnect=False, **credentials(settings))


STREAM_OPERATIONS = [
    ("projector", "$JS.API.STREAM.PURGE.SEC_CTRL", "projector purges the control stream"),
    ("runner", "$JS.API.STREAM.DELETE.SEC_SPANS", "runner deletes the spans stream"),
    ("learner", "$JS.API.STREAM.UPDATE.SEC_CTRL", "learner changes the control stream"),
    ("projector", "$JS.API.CONSUMER.DELETE.SEC_CTRL.sec-dispatch", "projector deletes the dispatch consumer"),
    ("projector", "$JS.API.CONSUMER.MSG.NEXT.SEC_CTRL.sec-dispatch", "projector takes a dispatch message"),
    ("runner", "$O.sec-weights.C.x", "runner writes a weights chunk"),
    ("storeserver", "$JS.API.STREAM.DELETE.SEC_CTRL", "store server deletes the control stream"),
    ("storeserver", "$JS.API.STREAM.PURGE.SEC_SPANS", "store server purges the spans stream"),
    ("storeserver", "$JS.API.STREAM.UPDATE.SEC_CTRL", "store server changes the control stream"),
    ("storeserver", "$JS.API.CONSUMER.DELETE.SEC_CTRL.sec-dispatch", "store server deletes the dispatch consumer"),
    ("storeserver", "$O.sec-weights.C.x", "store server writes a weights chunk"),
    ("storeserver", "$JS.API.STREAM.CREATE.OBJ_sec-weights", "store server creates the weights store"),
]


@pytest.mark.parametrize(("role", "api", "why"), STREAM_OPERATIONS, ids=[why for _, _, why in STREAM_OPERATIONS])
async def test_forbidden_stream_operation_is_refused(
    secured_server: NatsServer, auth_dir: Path, admin_log: EventLog, role: str, api: str, why: str
) -> None:
    errors: list[str] = []
    nc = await raw_client(secured_server, auth_dir, role, errors)
    try:
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request(api, b"{}", timeout=0.5)
    finally:
        await nc.close()
    assert any(f'permissions violation for publish to "{api.lower()}"' in e for e in errors), why
    assert (await admin_log.js.stream_info("SEC_CTRL")).config.name == "SEC_CTRL"


async def test_a_role_cannot_listen_to_the_log_or_to_another_role_s_replies(
    secured_server: NatsServer, auth_dir: Path
) -> None:
    errors: list[str] = []
    nc = await raw_client(secured_server, auth_dir, "projector", errors)
    try:
        for subject in ("sec.>", "_INBOX.>", "_INBOX_runner.>", ">"):
            await nc.subscribe(subject)
        await nc.flush()
        deadline = time.monotonic() + 5
        while len(errors) < 4 and time.monotonic() < deadline:
            await nc.flush()
    finally:
        await nc.close()
    for subject in ("sec.>", "_inbox.>", "_inbox_runner.>", ">"):
        assert any(f'permissions violation for subscription to "{subject}"' in e for e in errors), (subject, errors)


@pytest.mark.parametrize("who", ["wrong password", "no credentials", "another role's password"])
async def test_bad_credentials_are_refused_at_connect(secured_server: NatsServer, auth_dir: Path, who: str) -> None:
    settings = role_settings(secured_server, auth_dir, "runner")
    settings.connect_timeout_s = 0.5  # a refused client keeps retrying until this deadline
    if who == "wrong password":
        settings.password = "not-the-password"
    elif who == "no credentials":
        settings.user = settings.password = None
    else:
        settings.password = read_credentials(auth_dir, "learner")["VOLTBUS_NATS__PASSWORD"]
    with pytest.raises(BusAuthRefused, match="Authorization Violation"):
        await connect(settings)


def test_every_role_has_a_private_env_file_and_the_server_file_holds_no_password(auth_dir: Path) -> None:
    conf = (auth_dir / "auth.conf").read_text()
    for role in ROLES:
        path = auth_dir / f"{role}.env"
        assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
        password = read_credentials(auth_dir, role)["VOLTBUS_NATS__PASSWORD"]
        assert len(password) >= 32 and password not in conf
        assert f'user: "{role}", password: "$2b$04$' in conf


async def test_voltbus_metrics_runs_as_the_read_only_dashboard_user(
    secured_server: NatsServer, auth_dir: Path, admin_log: EventLog, tmp_path: Path
) -> None:
    """``voltbus metrics`` only reads the log, so the dashboard's user (which may write nothing) can run it."""
    from voltbus.schemas.training import RunFinished, StepCompleted
    from voltbus.services.ops.metric_sinks import open_sink
    from voltbus.services.ops.run_metrics import export_run
    from voltbus.services.settings import Settings

    run = "run-readonly"
    for event in (
        RunStarted(event_id=f"{run}-s", run_id=run, algorithm="grpo", config=msgspec.Raw(b"{}"), at=1.0),
        StepCompleted(event_id=f"{run}-0", run_id=run, step=0, metrics={"reward_mean": 0.5}, at=2.0),
        RunFinished(event_id=f"{run}-f", run_id=run, status="succeeded", at=3.0),
    ):
        await admin_log.append([event])
    before = len(violations(secured_server))
    reader = Settings(nats=role_settings(secured_server, auth_dir, "dashboard"))
    done = await export_run(reader, run, lambda: open_sink("tensorboard", tmp_path, "voltbus", run))
    assert (done.steps, done.finished) == ([0], "succeeded")
    assert violations(secured_server, before) == []
