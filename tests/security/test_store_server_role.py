"""``voltbus store-server`` with its own bus role, ``storeserver``, on a server that enforces the generated
permissions: Agent Lightning's store routes work end to end with no violation logged (the attacks it is refused
are in ``test_bus_permissions.py``), and an auth directory made before the role existed gets it added."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import bcrypt
import httpx
import pytest

from voltbus.schemas.subjects import Topology
from voltbus.services.ops.credentials import ensure_credentials
from voltbus.services.ops.natsauth import ROLES, AuthError, init_auth, read_credentials
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.settings import NatsSettings, ProjectorSettings, Settings, StoreServerSettings
from voltbus.services.storeserver.app import run

from ..conftest import free_port, running
from ..services.storeserver.test_routes import al_span, get, post
from ..store.conftest import projector
from ..test_up import VOLTBUS
from .test_bus_permissions import auth_dir, role_settings, secured_server, violations  # noqa: F401


@asynccontextmanager
async def store_server_as_role(nats: NatsSettings, projector_nats: NatsSettings, db: Path) -> AsyncIterator[str]:
    """A projector on its own role and a store server on ``nats`` (its role); yields the store server's URL."""
    async with projector(projector_nats, db) as projector_url:
        port = free_port()
        settings = Settings(
            nats=nats, projector=ProjectorSettings(url=projector_url), store_server=StoreServerSettings(port=port)
        )
        async with running(run, settings, within=30):
            yield f"http://127.0.0.1:{port}"


@pytest.mark.e2e
async def test_the_store_server_serves_agent_lightning_s_routes_as_the_storeserver_role(
    secured_server: NatsServer,  # noqa: F811
    auth_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    nats = {r: role_settings(secured_server, auth_dir, r).model_copy(update={"request_timeout_s": 5.0})
            for r in ("storeserver", "projector")}  # fmt: skip
    assert nats["storeserver"].user == "storeserver"
    before = len(violations(secured_server))
    async with (
        store_server_as_role(nats["storeserver"], nats["projector"], tmp_path / "p.duckdb") as url,
        httpx.AsyncClient(base_url=url, timeout=60) as http,
    ):
        llm = {"resource_type": "llm", "endpoint": "http://e/v1", "model": "m"}
        await post(http, "/resources", {"main_llm": llm}, 201)  # the learner's right: res.*
        body = {"rollouts": [{"input": {"q": i}, "mode": "train"} for i in range(2)]}
        rid, other = [r["rollout_id"] for r in await post(http, "/queues/rollouts/enqueue", body, 201)]
        [claimed] = await post(http, "/queues/rollouts/dequeue", {"limit": 1, "worker_id": "w-1"})  # the dispatch
        assert claimed["rollout_id"] == rid and claimed["attempt"]["worker_id"] == "w-1"
        aid = claimed["attempt"]["attempt_id"]
        seq = (await post(http, "/spans/next", {"rollout_id": rid, "attempt_id": aid}))["sequence_id"]  # seq.*
        await post(http, "/spans", al_span(rid, aid, seq, "1" * 16), 201)  # sp.*
        await post(http, "/workers/w-1", {"heartbeat_stats": {"cpu": 0.5}})  # wk.*
        attempt = await post(http, f"/rollouts/{rid}/attempts/{aid}", {"status": "succeeded"})  # ro.*.e
        assert attempt["status"] == "succeeded"
        cancelled = await post(http, f"/rollouts/{other}", {"status": "cancelled"})  # an end by authority: ro.*.c
        assert cancelled["status"] == "cancelled"
        done = await post(http, "/waits/rollouts", {"rollout_ids": [rid, other], "timeout": 0.1})
        assert {r["rollout_id"]: r["status"] for r in done} == {rid: "succeeded", other: "cancelled"}
        assert (await post(http, "/spans/search", {"rollout_id": rid}))["total"] == 1
        assert (await get(http, "/workers/w-1"))["heartbeat_stats"]["cpu"] == 0.5
        stats = await get(http, "/statistics")
        assert (stats["total_rollouts"], stats["total_spans"]) == (2, 1)
    assert violations(secured_server, before) == [], "the storeserver role was refused something the store API needs"


def test_an_auth_dir_made_before_the_role_gets_it_keeping_every_other_password(tmp_path: Path) -> None:
    """``--keep-existing`` (what ``voltbus up`` and compose run on every start) adds the role's user and file."""
    auth = tmp_path / "auth"
    init_auth(auth, Topology(namespace="vb"), rounds=4)
    (auth / "storeserver.env").unlink()  # as an earlier version left it
    with pytest.raises(AuthError, match=r"no credentials for role 'storeserver'.*voltbus nats auth init --out .*"):
        read_credentials(auth, "storeserver")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLTBUS_")}
    env["VOLTBUS_CREDENTIALS_FILE"] = str(auth / "storeserver.env")  # as docs/store-server.md says to start it
    out = subprocess.run([*VOLTBUS, "store-server"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"`voltbus nats auth init --out {auth} --keep-existing`" in out.stderr, out.stderr
    old = {role: read_credentials(auth, role)["VOLTBUS_NATS__PASSWORD"] for role in ROLES if role != "storeserver"}
    made = ensure_credentials(auth, Topology(namespace="vb"), rounds=4)
    assert made[0] == "a bus user for storeserver (every other password kept)"
    conf = (auth / "auth.conf").read_text()
    hashes = {line.split('"')[1]: line.split('"')[3] for line in conf.splitlines() if "user: " in line}
    new = read_credentials(auth, "storeserver")
    assert new["VOLTBUS_NATS__USER"] == "storeserver" and "VOLTBUS_PROJECTOR__TOKEN" in new
    for role, password in old.items() | {("storeserver", new["VOLTBUS_NATS__PASSWORD"])}:
        assert bcrypt.checkpw(password.encode(), hashes[role].encode()), role  # the server accepts every password
    assert {role: read_credentials(auth, role)["VOLTBUS_NATS__PASSWORD"] for role in old} == old
    assert (auth / "storeserver.env").stat().st_mode & 0o777 == 0o600
    assert ensure_credentials(auth, Topology(namespace="vb"), rounds=4) == []  # nothing more to add
