"""Per-rollout agent keys: a rollout's key works on its own routes only; admin keys work everywhere."""

from __future__ import annotations

import httpx

from voltbus.services.keys import rollout_key
from voltbus.store import Store

from .conftest import GatewayFactory

CALL = {"model": "stub", "messages": [{"role": "user", "content": "2+40"}]}
SECRET = "rollout-key-secret"


async def test_a_rollout_key_speaks_only_for_its_own_rollout(make_gateway: GatewayFactory, store: Store) -> None:
    g = await make_gateway(key_secret=SECRET, admin_key="root")
    other = await store.start_rollout({"question": "1+1"}, mode="train")
    own, foreign = rollout_key(SECRET, g.rid), rollout_key(SECRET, other.rollout_id)
    chat = f"/proxy/rollout/{g.rid}/attempt/{g.aid}/mode/train/openai/v1/chat/completions"
    events = f"/api/rollouts/{g.rid}/attempt/{g.aid}/events"
    reward = {"event_type": "reward", "data": {"value": 1.0}}
    async with httpx.AsyncClient(base_url=g.url) as http:

        async def status(path: str, body: dict, key: str | None, **headers: str) -> int:
            auth = {"Authorization": f"Bearer {key}"} if key else {}
            return (await http.post(path, json=body, headers={**auth, **headers})).status_code

        assert await status(chat, CALL, own) == 200
        assert await status(events, reward, own) == 200
        assert await status(chat, CALL, foreign) == 403
        assert await status(events, reward, foreign) == 403
        assert await status(chat, CALL, None) == 401
        assert await status(chat, CALL, "made-up") == 401
        assert await status(chat, CALL, "root") == 200  # the admin key works on every rollout
        by_header = {"X-Voltbus-Rollout-Id": g.rid}
        assert await status("/v1/chat/completions", CALL, foreign, **by_header) == 403
        assert await status("/v1/chat/completions", CALL, own, **by_header) == 200
        assert await status("/v1/chat/completions", CALL, own) == 401  # unattributed: needs the shared key
    assert len(g.engine.received) == 3  # the three accepted calls; refused ones never reached the engine


async def test_an_unknown_rollout_is_not_revealed_to_a_caller_without_its_key(make_gateway: GatewayFactory) -> None:
    g = await make_gateway(key_secret=SECRET)
    path = "/proxy/rollout/ro-nope/attempt/at-nope/mode/train/openai/v1/chat/completions"
    async with httpx.AsyncClient(base_url=g.url) as http:
        assert (await http.post(path, json=CALL)).status_code == 401
        own = {"Authorization": f"Bearer {rollout_key(SECRET, 'ro-nope')}"}
        assert (await http.post(path, json=CALL, headers=own)).status_code == 404
