"""Finding 8 of issue 24: ``voltbus up`` (docker-compose.yml run as local processes) is closed by default.

Its ``credentials`` job makes the gateway's key secret and admin key and the projector's SQL token with
the bus users, on the first start and with no extra command. So the gateway refuses a call without a
key, an agent's reward or call on another rollout, and ``/admin/pause`` without the admin key, and the
log is unchanged by every refusal. The files are private, reused by the next start, and an auth
directory of an earlier version (bus users only) is upgraded in place without changing its passwords.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import nats
import pytest

from tests.conftest import free_port, wait_for
from tests.test_up import UpProcess
from voltbus.schemas.subjects import Topology
from voltbus.services.keys import rollout_key
from voltbus.services.ops.compose import read_env_file
from voltbus.services.ops.natsauth import ROLES, init_auth

SECRETS = ["VOLTBUS_GATEWAY__KEY_SECRET", "VOLTBUS_GATEWAY__ADMIN_KEY", "VOLTBUS_PROJECTOR__TOKEN"]
CHAT = {"model": "policy", "messages": [{"role": "user", "content": "2+3="}], "max_tokens": 2}
REWARD = {"event_type": "reward", "data": {"value": 100.0}}


async def heads(port: int, auth: Path) -> dict[str, int]:
    """Last sequence of every stream on the bus ``up`` started, read as the operator (admin)."""
    password = read_env_file(auth / "admin.env", {})["VOLTBUS_NATS__PASSWORD"]
    nc = await nats.connect(f"nats://127.0.0.1:{port}", user="admin", password=password, connect_timeout=5)
    try:
        return {s.config.name or "": s.state.last_seq for s in await nc.jetstream().streams_info()}
    finally:
        await nc.close()


def stream_heads(port: int, auth: Path) -> dict[str, int]:
    return asyncio.run(heads(port, auth))


def stop(up: UpProcess) -> str:
    up.proc.send_signal(signal.SIGINT)
    code, text = up.finish()
    assert code == 0, text
    return text


@pytest.fixture(scope="module")
def gateway_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[UpProcess, Path]]:
    """``voltbus up`` with its defaults: the bus, the example model's inference server and the gateway."""
    tmp = tmp_path_factory.mktemp("secure")
    ports = {"nats": free_port(), "nats_monitor": free_port(), "inference": free_port(), "gateway": free_port()}
    up = UpProcess(tmp, "nats,inference,gateway", **ports)
    try:
        up.wait_for("up: 3 services", timeout=90)
        yield up, tmp / "up/auth"
    finally:
        if up.proc.poll() is None:
            stop(up)


def error_of(reply: httpx.Response) -> tuple[int, str, str]:
    body = reply.json()["error"]
    return reply.status_code, body["type"], body["message"]


@pytest.mark.timeout(120)
def test_the_gateway_refuses_what_no_key_or_another_rollout_s_key_may_do(gateway_up: tuple[UpProcess, Path]) -> None:
    up, auth = gateway_up
    base = f"http://127.0.0.1:{up.ports['gateway']}"
    secret = read_env_file(auth / "runner.env", {}).get("VOLTBUS_GATEWAY__KEY_SECRET", "none generated")
    key_a = rollout_key(secret, "ro-a")  # what the runner hands rollout A's agent
    admin_key = read_env_file(auth / "admin.env", {}).get("VOLTBUS_GATEWAY__ADMIN_KEY", "none generated")
    admin = {"Authorization": f"Bearer {admin_key}"}
    as_a = {"Authorization": f"Bearer {key_a}"}
    with httpx.Client(base_url=base, timeout=30) as http:
        ok = http.post("/v1/chat/completions", json=CHAT, headers=admin)  # the operator's key works: one record
        assert ok.status_code == 200, ok.text
        before = stream_heads(up.ports["nats"], auth)
        refused = [
            (http.post("/v1/chat/completions", json=CHAT), 401),
            (http.post("/rollout/ro-a/attempt/at-1/v1/chat/completions", json=CHAT), 401),
            (http.post("/rollout/ro-b/attempt/at-1/v1/chat/completions", json=CHAT, headers=as_a), 403),
            (http.post("/api/rollouts/ro-b/attempt/at-1/events", json=REWARD), 401),
            (http.post("/api/rollouts/ro-b/attempt/at-1/events", json=REWARD, headers=as_a), 403),
            (http.post("/admin/pause", json={"reason": "attack"}), 401),
            (http.post("/proxy/pause", json={}), 401),
            (http.post("/admin/pause", json={"reason": "attack"}, headers=as_a), 403),
        ]
        for reply, status in refused:
            assert reply.status_code == status, f"{reply.request.method} {reply.request.url}: {reply.text}"
            code, kind, message = error_of(reply)
            assert (code, kind) == (status, "unauthorized" if status == 401 else "forbidden"), reply.text
            if status == 403:
                assert "another rollout" in message or "agent key may not use admin routes" in message, message
        state = http.get("/admin/inflight", headers=admin)
        assert state.status_code == 200 and state.json()["paused"] is False, state.text
    assert stream_heads(up.ports["nats"], auth) == before  # nothing recorded: no call, no reward, no pause
    assert before, "the operator's call created the streams"


def test_the_generated_credentials_are_private_and_complete(gateway_up: tuple[UpProcess, Path]) -> None:
    _, auth = gateway_up
    assert {p.name for p in auth.iterdir()} == {"auth.conf"} | {f"{role}.env" for role in ROLES}
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in auth.iterdir())
    assert auth.stat().st_mode & 0o077 == 0
    files = {role: read_env_file(auth / f"{role}.env", {}) for role in ROLES}
    gateway = files["gateway"]
    assert all(len(gateway[var]) >= 32 for var in SECRETS)
    assert len({gateway[var] for var in SECRETS}) == 3  # three different secrets
    assert files["runner"]["VOLTBUS_GATEWAY__KEY_SECRET"] == gateway["VOLTBUS_GATEWAY__KEY_SECRET"]
    assert files["learner"]["VOLTBUS_LEARNER__GATEWAY_ADMIN_KEY"] == gateway["VOLTBUS_GATEWAY__ADMIN_KEY"]
    assert all(f["VOLTBUS_PROJECTOR__TOKEN"] == gateway["VOLTBUS_PROJECTOR__TOKEN"] for f in files.values())
    holders = {role for role, f in files.items() if "VOLTBUS_GATEWAY__KEY_SECRET" in f}
    assert holders == {"gateway", "runner"}  # agents' keys are derived from it: nobody else holds it


@pytest.mark.timeout(120)
def test_a_second_start_reuses_the_credentials(tmp_path: Path) -> None:
    contents = []
    for _ in range(2):
        up = UpProcess(tmp_path, "nats", nats=free_port(), nats_monitor=free_port())
        up.wait_for("up: 1 services")
        contents.append({p.name: secrets_of(p.read_text()) for p in (tmp_path / "up/auth").iterdir()})
        stop(up)
    assert all(var in contents[0]["gateway.env"] for var in SECRETS)
    assert contents[1] == contents[0]


def secrets_of(text: str) -> str:
    """A credentials file without the lines ``up`` rewrites at each start (where this start's bus and projector are)."""
    where = ("VOLTBUS_NATS__URL=", "VOLTBUS_NATS__NAMESPACE=", "VOLTBUS_PROJECTOR__URL=")
    return "\n".join(line for line in text.splitlines() if not line.startswith(where))


@pytest.mark.timeout(120)
def test_an_auth_dir_of_an_earlier_version_is_upgraded_keeping_its_bus_passwords(tmp_path: Path) -> None:
    auth = tmp_path / "up/auth"
    init_auth(auth, Topology(namespace="vb"), rounds=4)  # what earlier versions wrote: bus users only
    old = {role: (auth / f"{role}.env").read_text() for role in ROLES}
    conf = (auth / "auth.conf").read_text()
    ports = {"nats": free_port(), "nats_monitor": free_port()}
    up = UpProcess(tmp_path, "nats,coordinator", **ports)
    up.wait_for("up: 2 services")

    async def control_stream() -> bool:  # the coordinator connected with its unchanged password, and the admin too
        return "VB_CTRL" in await heads(ports["nats"], auth)

    asyncio.run(wait_for(control_stream, timeout=60, what="the coordinator's control stream", every=0.2))
    text = stop(up)
    assert "the bus refused" not in text
    assert (auth / "auth.conf").read_text() == conf
    for role in ROLES:
        new = (auth / f"{role}.env").read_text()
        assert new.startswith(old[role]) and "VOLTBUS_PROJECTOR__TOKEN=" in new, role
    assert all(var in (auth / "gateway.env").read_text() for var in SECRETS)
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in auth.iterdir())
