"""Attacks on Agent Lightning 1.0's rollout and model routes (``services/gateway/agl_api.py``): an agent's key
manages nothing and reads only its own rollout; the gateway's bus user may queue rollouts but not end one by
authority (a cancel), which the server refuses and the route answers 403."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.services.gateway import conftest as gateway_fixtures
from tests.services.gateway.conftest import GatewayFactory
from tests.services.gateway.stub_llm import serve
from voltbus.services.eventlog import EventLog
from voltbus.services.gateway import build_app
from voltbus.services.keys import rollout_key
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.settings import GatewaySettings, Settings
from voltbus.store import Store, connect

from .test_bus_permissions import admin_log, auth_dir, role_settings, secured_server  # noqa: F401

make_gateway, store = gateway_fixtures.make_gateway, gateway_fixtures.store  # the gateway tests' fixtures

ADMIN, SECRET = "admin-key", "rollout-secret"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_an_agent_key_manages_nothing_and_reads_only_its_own_rollout(
    make_gateway: GatewayFactory, store: Store
) -> None:
    g = await make_gateway(admin_key=ADMIN, key_secret=SECRET)
    own = bearer(rollout_key(SECRET, g.rid))
    async with httpx.AsyncClient(base_url=g.url, headers=own) as http:
        answers = {
            "create": await http.post("/api/rollouts", json=[{"input": 1, "rollout_id": "sneaky"}]),
            "delete": await http.delete(f"/api/rollouts/{g.rid}"),
            "events": await http.get(f"/api/rollouts/{g.rid}/events"),
            "register models": await http.post("/api/models", json=[{"model": "m", "endpoint": "http://x/v1"}]),
            "clear models": await http.delete("/api/models"),
            "another rollout": await http.get("/api/rollouts/sneaky"),
            "a forged key": await http.get(f"/api/rollouts/{g.rid}", headers=bearer("vbk-forged")),
            "no key": await http.get(f"/api/rollouts/{g.rid}", headers={"Authorization": ""}),
        }
        mine = await http.get(f"/api/rollouts/{g.rid}")
    statuses = {name: r.status_code for name, r in answers.items()}
    assert statuses == {name: 401 if name == "no key" else 403 for name in answers}
    assert mine.status_code == 200 and mine.json()["rollout"]["status"]["last_attempt_id"] == g.aid
    assert await store.get_rollout_by_id("sneaky") is None
    assert (await store.get_rollout_by_id(g.rid)).status == "preparing"  # not cancelled  # type: ignore[union-attr]


async def test_with_agent_keys_and_no_admin_key_the_routes_are_closed(make_gateway: GatewayFactory) -> None:
    g = await make_gateway(key_secret=SECRET)
    async with httpx.AsyncClient(base_url=g.url) as http:
        create = await http.post("/api/rollouts", json=[{"input": 1}])
    assert create.status_code == 403 and "no gateway.admin_key" in create.json()["error"]["message"]


async def test_the_gateway_s_bus_user_queues_rollouts_but_may_not_cancel_one(
    secured_server: NatsServer,  # noqa: F811
    auth_dir: Path,  # noqa: F811
    admin_log: EventLog,  # noqa: F811
) -> None:
    nats = role_settings(secured_server, auth_dir, "gateway").model_copy(update={"request_timeout_s": 5.0})
    gw = GatewaySettings(upstream_url="http://127.0.0.1:9/v1", admin_key=ADMIN)
    learner = await connect(settings=role_settings(secured_server, auth_dir, "learner"))
    try:
        async with (
            serve(build_app(Settings(nats=nats, gateway=gw)), "on") as url,
            httpx.AsyncClient(base_url=url, headers=bearer(ADMIN)) as http,
        ):
            created = await http.post("/api/rollouts", json=[{"input": {"q": 1}, "rollout_id": "via-gateway"}])
            deleted = await http.delete("/api/rollouts/via-gateway")
        queued = await learner.get_rollout_by_id("via-gateway")
    finally:
        await learner.close()
    assert created.status_code == 201, created.text
    assert deleted.status_code == 403 and "Permissions Violation" in deleted.json()["error"]["message"]
    assert queued is not None and queued.status == "queuing"
