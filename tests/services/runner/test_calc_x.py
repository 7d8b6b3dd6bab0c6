"""Agent Lightning 0.3's calc_x agent (``@agl.rollout async def calc_agent(task, llm)``) end to end: a real
runner claims its rollouts, it calls the stub model through the OpenAI client, and the runner records the
call as a span of the attempt and the reward it emits."""

from __future__ import annotations

from voltbus.schemas.resources import LLM
from voltbus.services.settings import NatsSettings
from voltbus.store import Store

from .conftest import runner_settings
from .stub_llm import stub_llm
from .test_runner import run_until_done, telemetry


async def test_calc_x_agent_runs_end_to_end_against_a_model(store: Store, nats_settings: NatsSettings) -> None:
    tasks = [
        {"id": "c1", "question": "6*7", "result": "42"},
        {"id": "c2", "question": "10/4", "result": "3"},  # a wrong label: the model's 2.5 earns 0
    ]
    async with stub_llm() as base_url:
        update = await store.add_resources({"main_llm": LLM(endpoint=base_url, model="calc-stub")})
        pinned = f"{update.resources_id}:1"
        rollouts = [await store.enqueue_rollout(t, mode="train", resources_id=pinned) for t in tasks]
        finished = await run_until_done(
            runner_settings(nats_settings, slots=2),
            "tests.services.runner.calc_x_agent:calc_agent",
            store,
            [r.rollout_id for r in rollouts],
        )
    assert [r.status for r in finished] == ["succeeded", "succeeded"], [r.attempt.error for r in finished]
    for done, expected in zip(finished, [1.0, 0.0], strict=True):
        spans, rewards = await telemetry(store, done.rollout_id)
        assert [(e.attempt_id, e.value) for e in rewards] == [(done.attempt.attempt_id, expected)]
        [call] = [s for s in spans if s.name == "openai.chat.completions.create"]
        assert call.attempt_id == done.attempt.attempt_id
        assert '"model": "calc-stub"' in call.attributes["voltbus.llm.request"]
        assert "### ANSWER: <answer> ###" in call.attributes["voltbus.llm.request"]  # calc_x's prompt went out
        assert call.attributes["voltbus.llm.response_token_ids"] == [7, 8]
        [reward_span] = [s for s in spans if s.sequence_id > call.sequence_id]  # the reward, after the call
        assert reward_span.name == "agentlightning.annotation"
        assert reward_span.attributes["agentlightning.reward.0.value"] == expected
