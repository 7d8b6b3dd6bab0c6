"""APO and Baseline through the whole system on a real nats-server (no model: the agent's reward depends
only on the prompt template it was given). The critic is a stub OpenAI-compatible chat server, the one
part standing in for something outside voltbus."""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

import voltbus as agl
from voltbus.schemas.training import RunFinished, RunStarted, StepCompleted, StepStarted
from voltbus.services.eventlog import Envelope
from voltbus.services.learner.apo.critic import Critic as SearchCritic
from voltbus.services.learner.apo.loop import Search
from voltbus.services.learner.session import Session
from voltbus.services.settings import NatsSettings, Settings
from voltbus.store import connect
from voltbus.trainer import APO, Baseline, Trainer
from voltbus.trainer.algorithms import bus
from voltbus.trainer.system import local_system

MARKER = "CAREFULLY"
CRITIQUE = "- The template never asks the agent to work carefully."
SEED = agl.PromptTemplate(template="Answer: {question}")
TASKS = [{"question": f"{i}+{i}", "answer": 2 * i} for i in range(6)]

Reply = Callable[[str], Response]


@agl.rollout
async def template_agent(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    """Reward 1.0 when the filled template carries the marker, else 0.2."""
    prompt = prompt_template.format(**task)
    agl.emit_message(prompt)
    return 1.0 if MARKER in prompt else 0.2


@agl.rollout
async def known_agent(task: dict[str, Any], resources: agl.NamedResources) -> float:
    return task["reward"]


def chat(content: str) -> Response:
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return JSONResponse({"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]})


class Critic:
    """A chat-completions server on a socket bound (and listening) before its thread starts."""

    def __init__(self, reply: Reply) -> None:
        self.prompts: list[str] = []

        async def completions(request: Request) -> Response:
            prompt = (await request.json())["messages"][-1]["content"]
            self.prompts.append(prompt)
            return reply(prompt)

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> Critic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@pytest.fixture
def good_critic() -> Iterator[Critic]:
    """Critiques, then edits every template into a new one carrying the marker."""
    counter = itertools.count()

    def reply(prompt: str) -> Response:
        if CRITIQUE in prompt:  # the edit request quotes the critique
            return chat(f"```\nThink {MARKER} (take {next(counter)}). Answer: {{question}}\n```")
        return chat(CRITIQUE)

    with Critic(reply) as critic:
        yield critic


@pytest.fixture
def bad_critic() -> Iterator[Critic]:
    """Fails in every way: HTTP 500, a body that is no chat completion, empty edits, edits that do not format."""
    failed = [lambda: JSONResponse({"error": "boom"}, status_code=500), lambda: PlainTextResponse("{}")]
    critiques = itertools.cycle([*failed, lambda: chat(CRITIQUE), lambda: chat(CRITIQUE)])
    edits = itertools.cycle(["", "Answer {problem}", "Answer {question", "```\n```"])

    def reply(prompt: str) -> Response:
        return chat(next(edits)) if CRITIQUE in prompt else next(critiques)()

    with Critic(reply) as critic:
        yield critic


def trainer(nats: NatsSettings, algorithm: Any, lines: list[str]) -> Trainer:
    resources = {"prompt_template": SEED}
    return Trainer(
        algorithm=algorithm, n_runners=8, initial_resources=resources, settings=Settings(nats=nats), say=lines.append
    )


async def run_state(nats: NatsSettings, run_id: str) -> tuple[list[Any], Any]:
    """The run's events and the latest version of its resources bundle."""
    store = await connect(settings=nats)
    try:
        stored, _ = await store.log.read_subject(store.topology.run(run_id))
        return [e.event for e in stored if isinstance(e, Envelope)], await store.get_resources_by_id(run_id)
    finally:
        await store.close()


@pytest.mark.timeout(300)
def test_apo_publishes_a_better_template(nats_settings: NatsSettings, good_critic: Critic):
    critic = agl.LLM(endpoint=good_critic.url, model="stub")
    apo = APO(critic=critic, beam_width=2, branch_factor=2, rounds=2, val_batch_size=3, gradient_batch_size=2)
    lines: list[str] = []
    result = trainer(nats_settings, apo, lines).fit(template_agent, TASKS, val_dataset=TASKS[:4])

    assert result["before"] == pytest.approx(0.2) and result["after"] == pytest.approx(1.0)
    assert MARKER in result["template"] and result["critic_errors"] == {}
    events, latest = asyncio.run(run_state(nats_settings, result["run_id"]))
    assert f"{latest.resources_id}:{latest.version}" == result["resources_id"]
    assert latest.resources["prompt_template"].template == result["template"]
    assert isinstance(events[0], RunStarted) and events[0].algorithm == "apo"
    assert [e.step for e in events if isinstance(e, StepStarted)] == [0, 1]
    assert [len(e.rollout_ids) for e in events if isinstance(e, StepStarted)] == [2 * 2 * 2] * 2
    completed = [e for e in events if isinstance(e, StepCompleted)]
    first = completed[0].metrics
    assert first["children"] == 4 and first["candidates_scored"] == 5 and first["critic_errors"] == 0
    assert first["val_reward_best"] == 1.0 and first["val_reward_mean"] == pytest.approx((0.2 + 4) / 5)
    assert first["gradient_reward_mean"] == pytest.approx(0.2) and first["best_val_reward_full"] == 1.0
    assert completed[1].metrics["candidates_scored"] == 2 + completed[1].metrics["children"]
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    # the critic saw the runs: the seed's template, a task's input and its low reward
    first_critique = next(p for p in good_critic.prompts if CRITIQUE not in p)
    assert "Answer: {question}" in first_critique and "reward 0.200" in first_critique
    assert '"question"' in first_critique and "agentlightning.message" in first_critique  # inputs and traces
    assert sum(line.startswith("APO round") for line in lines) == 2


async def search_without_finishing(apo: APO, t: Trainer, train: list[Any], val: list[Any]) -> None:
    """What a learner that dies after its last round leaves: the rounds and their state, no RunFinished."""
    async with bus(t.settings, t.say) as settings, local_system(settings, template_agent, t.n_runners) as s:
        store = await connect(settings=s.nats)
        session = Session(store, apo.run_id or "", s.projector)
        critic = SearchCritic(apo.critic_llm(), apo.temperature, apo.max_retries)
        try:
            history = await session.open("apo", {})
            await Search(apo, session, critic, t.initial_resources, train, val, t.say).run(SEED, history)
        finally:
            await critic.close()
            await session.close()
            await store.close()


@pytest.mark.timeout(300)
def test_an_apo_run_that_stopped_after_a_round_continues_from_its_state(
    nats_settings: NatsSettings, good_critic: Critic
):
    critic = agl.LLM(endpoint=good_critic.url, model="stub")
    shape = {"beam_width": 2, "branch_factor": 2, "val_batch_size": 3, "gradient_batch_size": 2, "run_id": "apo-r"}
    first = trainer(nats_settings, APO(critic=critic, rounds=1, **shape), [])
    asyncio.run(search_without_finishing(first.algorithm, first, TASKS, TASKS[:4]))
    lines: list[str] = []
    result = trainer(nats_settings, APO(critic=critic, rounds=2, **shape), lines).fit(template_agent, TASKS, TASKS[:4])

    assert any("resuming after round 0" in line for line in lines)
    assert result["before"] == pytest.approx(0.2) and result["after"] == pytest.approx(1.0)
    assert len(result["steps"]) == 2  # round 0 restored from the saved state, round 1 run now
    events, latest = asyncio.run(run_state(nats_settings, "apo-r"))
    assert sum(isinstance(e, RunStarted) for e in events) == 1
    assert [e.step for e in events if isinstance(e, StepStarted)] == [0, 1]
    assert [e.step for e in events if isinstance(e, StepCompleted)] == [0, 1]
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    assert latest.resources["prompt_template"].template == result["template"] and MARKER in result["template"]


@pytest.mark.timeout(300)
def test_critic_failures_are_counted_and_the_run_keeps_the_original(nats_settings: NatsSettings, bad_critic: Critic):
    apo = APO(critic=bad_critic.url, model="stub", max_retries=0, beam_width=2, branch_factor=2, rounds=2)
    result = trainer(nats_settings, apo, []).fit(template_agent, TASKS, val_dataset=TASKS[:3])

    assert result["template"] == SEED.template and result["before"] == result["after"] == pytest.approx(0.2)
    # 8 critiques: 2 of each kind in the cycle; the 4 that succeed lead to one edit of each kind
    assert result["critic_errors"] == {"critique_http_500": 2, "critique_malformed": 2, "edit_empty": 2}
    events, latest = asyncio.run(run_state(nats_settings, result["run_id"]))
    assert latest.resources["prompt_template"].template == SEED.template
    for step in (e for e in events if isinstance(e, StepCompleted)):
        m = step.metrics
        assert m["children"] == 0 and m["candidates_scored"] == 1
        assert m["critic_errors"] + m["edits_unformattable"] == 4, m
    assert sum(step["edits_unformattable"] for step in result["steps"]) == 2
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"


@pytest.mark.timeout(300)
def test_baseline_reports_the_agents_mean_reward(nats_settings: NatsSettings):
    tasks = [{"reward": r} for r in (0.0, 0.25, 0.5, 1.0)]
    lines: list[str] = []
    dev = trainer(nats_settings, None, lines).dev(known_agent, tasks)
    assert dev == {"train": {"mean_reward": pytest.approx(0.4375), "rollouts": 4.0}}
    out = asyncio.run(Baseline().fit(trainer(nats_settings, None, []), known_agent, tasks[:2], tasks[2:]))
    assert out["train"]["mean_reward"] == pytest.approx(0.125) and out["val"]["mean_reward"] == pytest.approx(0.75)


def test_apo_resolves_from_an_import_string_and_checks_its_inputs():
    assert isinstance(Trainer(algorithm="voltbus.trainer.APO").algorithm, APO)
    with pytest.raises(ValueError, match="beam_width"):
        APO(beam_width=0)
    no_template = Trainer(algorithm=APO(critic="http://127.0.0.1:9/v1"), initial_resources={"other": SEED})
    with pytest.raises(ValueError, match="PromptTemplate named 'prompt_template'"):
        no_template.fit(template_agent, TASKS, TASKS)
    bad_seed = Trainer(algorithm=APO(), initial_resources={"prompt_template": agl.PromptTemplate(template="{x")})
    with pytest.raises(ValueError, match="cannot be used"):
        bad_seed.fit(template_agent, TASKS, TASKS)
