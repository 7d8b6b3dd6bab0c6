"""A publish the bus refuses a role fails at once with one line naming the user and the subject (finding 12).

Before, a refusal looked like a lost ack: "no ack (try n), retrying" six times, then ``PublishFailed ... not
acknowledged``. The server answers a refused publish with a ``-ERR`` and no ack, so a retry can never succeed.
Each test counts the server's violation lines for the subject: one means one attempt, no retry.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import wait_for
from voltbus.schemas.errors import PermissionDenied
from voltbus.schemas.resources import ResourcesPublished
from voltbus.schemas.rollouts import AttemptSucceeded
from voltbus.schemas.spans import RewardReported
from voltbus.services.eventlog import EventLog
from voltbus.services.ops.natsauth import read_credentials
from voltbus.services.ops.natsserver import NatsServer

from .test_bus_cli import VOLTBUS
from .test_bus_permissions import (
    NS,
    admin_log,
    auth_dir,
    queued,
    raw_client,
    role_settings,
    secured_server,
    stored_count,
)

__all__ = ["admin_log", "auth_dir", "secured_server"]  # fixtures used here

RETRIES = 5
"""The default ``publish_retries``: before, a refused publish was sent 1 + 5 times."""


def refusals(server: NatsServer, role: str, subject: str) -> int:
    """How many publishes of ``role`` to ``subject`` the server refused (one log line each)."""
    needle = f'user:{role}" - Publish Violation - Subject "{subject}"'
    return sum(needle in line for line in server.tail)


async def connect_as(server: NatsServer, auth: Path, role: str) -> EventLog:
    """``role``'s EventLog with the default retries and a short ack timeout (a retry would show quickly)."""
    settings = role_settings(server, auth, role).model_copy(update={"publish_retries": RETRIES})
    return await EventLog.connect(settings, name=f"refused-{role}")


def no_retries(caplog: pytest.LogCaptureFixture) -> None:
    lines = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage() or "no ack" in r.getMessage()]
    assert lines == []
    assert not [r for r in caplog.records if "permissions violation" in r.getMessage().lower()]  # said once, raised


async def settled_refusals(server: NatsServer, auth: Path, role: str, subject: str) -> int:
    """``refusals`` once the server has logged everything sent before: a marker publish, refused and logged after
    them, is waited for (with a deadline) in the server's log."""
    marker = f"{NS}.marker.{uuid.uuid4().hex}"
    nc = await raw_client(server, auth, role, [])
    try:
        await nc.publish(marker, b"")
        await nc.flush()
    finally:
        await nc.close()
    await wait_for(lambda: refusals(server, role, marker), timeout=30, what="the marker's refusal in the log")
    return refusals(server, role, subject)


@pytest.mark.parametrize(
    ("role", "kind"),
    [("gateway", AttemptSucceeded), ("runner", ResourcesPublished)],
    ids=["gateway ends an attempt", "runner publishes a resources version"],
)
async def test_a_refused_control_append_raises_once_naming_user_and_subject(
    secured_server: NatsServer, auth_dir: Path, admin_log: EventLog, caplog: pytest.LogCaptureFixture,
    role: str, kind: type,
) -> None:  # fmt: skip
    now = time.time()
    event = {
        AttemptSucceeded: lambda: AttemptSucceeded(
            event_id=f"end-{role}", rollout_id=f"r-{role}", attempt_id="a", at=now
        ),
        ResourcesPublished: lambda: ResourcesPublished(
            event_id=f"res-{role}", name=f"m{role}", resources_id=f"res-{role}", version=1, resources={}, created_at=now
        ),
    }[kind]()
    subject = admin_log._message(event).subject
    log = await connect_as(secured_server, auth_dir, role)
    try:
        with caplog.at_level(logging.INFO), pytest.raises(PermissionDenied) as refused:
            await log.append([event])
    finally:
        await log.close()
    error = refused.value
    assert (error.user, error.subject, error.event_ids) == (role, subject, [event.event_id])
    assert "\n" not in str(error) and f"bus user '{role}' may not publish to {subject}" in str(error)
    no_retries(caplog)
    assert await settled_refusals(secured_server, auth_dir, role, subject) == 1  # one try, not 1 + RETRIES
    assert await stored_count(admin_log, subject) == 0


async def test_a_refused_span_publish_raises_once(
    secured_server: NatsServer, auth_dir: Path, admin_log: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    rewards = [
        RewardReported(event_id=f"rw-{i}", rollout_id="r-spans", attempt_id="a", value=1.0, at=time.time())
        for i in range(3)
    ]
    subject = admin_log._message(rewards[0]).subject
    log = await connect_as(secured_server, auth_dir, "projector")
    try:
        with caplog.at_level(logging.INFO), pytest.raises(PermissionDenied) as refused:
            await log.publish_spans(rewards)
    finally:
        await log.close()
    assert (refused.value.user, refused.value.subject) == ("projector", subject)
    assert sorted(refused.value.event_ids) == ["rw-0", "rw-1", "rw-2"]
    no_retries(caplog)
    assert await settled_refusals(secured_server, auth_dir, "projector", subject) == 3  # each event once
    assert await stored_count(admin_log, subject) == 0


async def test_refused_pipelined_appends_and_counters_raise_at_once(
    secured_server: NatsServer, auth_dir: Path, admin_log: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    log = await connect_as(secured_server, auth_dir, "dashboard")
    events = [queued(f"many-{i}") for i in range(20)]
    subjects = [admin_log._message(e).subject for e in events]
    counter = log.topology.counter("r-counter")
    try:
        with caplog.at_level(logging.INFO):
            with pytest.raises(PermissionDenied) as many:
                await log.append_many(events)
            with pytest.raises(PermissionDenied) as count:
                await log.next_sequence("r-counter")
    finally:
        await log.close()
    assert many.value.user == "dashboard" and many.value.subject in subjects
    assert (count.value.user, count.value.subject) == ("dashboard", counter)
    no_retries(caplog)
    assert await settled_refusals(secured_server, auth_dir, "dashboard", counter) == 1
    for subject in subjects:  # pipelined once, and the first redone one raised: at most two tries each
        assert refusals(secured_server, "dashboard", subject) <= 2, subject
    assert [await stored_count(admin_log, s) for s in subjects] == [0] * len(subjects)


def test_the_cli_prints_one_line_for_a_refusal(secured_server: NatsServer, auth_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLTBUS_")}
    env |= read_credentials(auth_dir, "projector")
    env |= {"VOLTBUS_NATS__URL": secured_server.url, "VOLTBUS_NATS__REQUEST_TIMEOUT_S": "1"}
    env["VOLTBUS_LOG_LEVEL"] = "WARNING"  # warnings and errors only: a retry would show
    args = ["check", "--namespace", NS, "--rollouts", "5", "--spans", "5"]
    result = subprocess.run([*VOLTBUS, *args], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("voltbus: error: bus user 'projector' may not publish to sec."), lines[0]
    assert "retrying" not in result.stderr and "Traceback" not in result.stderr
