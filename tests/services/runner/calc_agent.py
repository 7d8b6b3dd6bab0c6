"""An agent written the way Agent Lightning 0.3's calc_x example is, with only the import swapped.

The model call is replaced by evaluating the expression (no model weights here); everything the
agent does with voltbus (resources, prompt template, emitters, reward) is as an AL user writes it.
"""

from __future__ import annotations

import ast
import contextlib
import operator
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import voltbus as agl  # was: import agentlightning as agl

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calculate(expression: str) -> float:
    """A tiny safe calculator (the 'tool' of the calc agent)."""

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"unsupported expression: {expression}")

    return walk(ast.parse(expression, mode="eval").body)


class CalcAgent(agl.LitAgent[dict[str, Any]]):
    """Answers arithmetic questions; reward 1 when right."""

    async def training_rollout_async(
        self, task: dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout
    ) -> None:
        prompt = resources["prompt"].format(question=task["question"])  # type: ignore[union-attr]
        llm: agl.LLM = resources["main_llm"]  # type: ignore[assignment]
        agl.emit_message(f"{llm.model} asked: {prompt}")
        answer = calculate(task["question"])
        agl.emit_object({"answer": answer})
        agl.emit_reward(1.0 if abs(answer - float(task["answer"])) < 1e-9 else 0.0)

    async def validation_rollout_async(
        self, task: dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout
    ) -> None:
        await self.training_rollout_async(task, resources, rollout)


@agl.rollout
def returns_float(task: Any, prompt_template: agl.PromptTemplate) -> float:
    return 0.25


@agl.rollout
def traced_then(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> float | None:
    """Two traced steps, then the result ``task["then"]`` says: None (its reward emitted) or a number."""
    agl.emit_message("step one")
    agl.emit_object({"step": 2})
    if task["then"] is None:
        agl.emit_reward(0.5)
    return task["then"]


@agl.rollout
async def returns_spans(task: Any, prompt_template: agl.PromptTemplate) -> list[agl.SpanCore]:
    return [agl.emit_reward(0.75, propagate=False)]


@agl.rollout
def raises(task: Any, prompt_template: agl.PromptTemplate) -> None:
    raise ValueError(f"cannot solve {task!r}")


@agl.rollout
def wrong_type(task: Any, prompt_template: agl.PromptTemplate) -> str:
    return "a string is not a result"


@agl.rollout
def bad_reward(task: Any, prompt_template: agl.PromptTemplate) -> None:
    agl.emit_reward("high")  # type: ignore[arg-type]


@agl.rollout
def hangs(task: Any, prompt_template: agl.PromptTemplate) -> None:
    time.sleep(3600)  # stands for a hung agent: only run isolated, whose process is killed at the timeout


@agl.rollout
def kills_itself(task: Any, prompt_template: agl.PromptTemplate) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@agl.rollout
def spawns_and_hangs(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> None:
    """Starts a grandchild process (its pid appended to ``task["pidfile"]``), then hangs."""
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(task["pidfile"], "a") as pids:
        pids.write(f"{grandchild.pid}\n")
    time.sleep(3600)  # stands for a stuck agent: the runner kills its process group at the timeout


@agl.rollout
def misbehaves(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> Any:
    """Fails as ``task["do"]`` says (raise, a wrong result type, a non-numeric reward, StopIteration, sys.exit) or
    succeeds ("good")."""
    match task["do"]:
        case "raise":
            raise ValueError(f"cannot solve {task!r}")
        case "wrong_type":
            return "a string is not a result"
        case "bad_reward":
            agl.emit_reward("high")  # type: ignore[arg-type]
            return None
        case "stop_iteration":
            return next(iter([]))  # StopIteration, which no future may carry
        case "exit":
            sys.exit(3)  # SystemExit: fails the attempt, not the slot
        case _:
            return 1.0


@agl.rollout
def big_spans(task: Any, prompt_template: agl.PromptTemplate) -> float:
    """Six 4 KB messages: more than a spans stream capped at 16 KiB takes."""
    for i in range(6):
        agl.emit_message(f"{i}:" + "x" * 4000)
    return 1.0


@agl.rollout
async def blocks_the_loop(task: Any, prompt_template: agl.PromptTemplate) -> float:
    """An async agent that blocks the runner's event loop for ``task["seconds"]`` (a blocking call in async code)."""
    began = time.time()
    time.sleep(task["seconds"])  # noqa: ASYNC251  # stands for blocking agent work: nothing else on the loop runs
    agl.emit_object({"blocked_from": began, "blocked_to": time.time()})
    return 1.0


@agl.prompt_rollout
def jinja_agent(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    text = prompt_template.format(items=task["items"])
    agl.emit_message(text)
    return float(len(task["items"]))


UNSTUCK = threading.Event()
"""Set after each runner test (conftest), so stuck first attempts run in the test's own process end with it."""


@agl.rollout
def stuck_on_first_attempt(task: Any, prompt_template: agl.PromptTemplate, rollout: agl.AttemptedRollout) -> float:
    agl.emit_message(f"attempt {rollout.attempt.sequence_id} started")
    if rollout.attempt.sequence_id == 1:
        UNSTUCK.wait(3600)  # the runner holding this attempt is killed, stopped or timed out meanwhile
    return 1.0


@agl.rollout
def takes_a_second(task: Any, prompt_template: agl.PromptTemplate) -> float:
    time.sleep(1.0)  # stands for a second of agent work
    return 1.0


@agl.llm_rollout
async def openai_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    import openai

    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="not-needed")
    reply = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], logprobs=True
    )
    return 1.0 if reply.choices[0].message.content == str(task["answer"]) else 0.0


@agl.llm_rollout
def raw_response_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """Calls the model as langchain-openai does: ``with_raw_response.create``, then ``parse()``."""
    import openai

    client = openai.OpenAI(base_url=llm.endpoint, api_key="not-needed")
    raw = client.chat.completions.with_raw_response.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], logprobs=True
    )
    reply = raw.parse()
    return 1.0 if raw.headers.get("content-type") and reply.choices[0].message.content == str(task["answer"]) else 0.0


@agl.llm_rollout
async def parse_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """Structured outputs, as Agent Lightning's APO judge asks for them: ``chat.completions.parse``."""
    import openai
    import pydantic

    class Answer(pydantic.BaseModel):
        value: int

    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="not-needed")
    reply = await client.chat.completions.parse(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], response_format=Answer
    )
    parsed = reply.choices[0].message.parsed
    return 1.0 if parsed is not None and parsed.value == task["answer"] else 0.0


_arrived: dict[str, tuple[list[str], Any]] = {}


@agl.rollout
async def global_otel_agent(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    """Traces with OpenTelemetry's global API, as third-party instrumentations do: two nested spans, started
    once ``task["together"]`` rollouts of its group are inside (so concurrent rollouts interleave), and one
    span from a thread that did not inherit the context (outside every attempt)."""
    import asyncio

    from opentelemetry import trace

    tracer = trace.get_tracer("third-party")
    arrived, everyone = _arrived.setdefault(task["group"], ([], asyncio.Event()))
    arrived.append(task["question"])
    if len(arrived) >= task["together"]:
        everyone.set()
    with contextlib.suppress(TimeoutError):  # the group's other rollouts run too (or it proceeds alone)
        await asyncio.wait_for(everyone.wait(), 20)
    with tracer.start_as_current_span("agent", attributes={"task": task["question"]}):
        await asyncio.sleep(0)  # the other rollouts' spans start here, in between
        with tracer.start_as_current_span("step", attributes={"task": task["question"]}):
            await asyncio.sleep(0)
            detached = threading.Thread(target=lambda: tracer.start_span("detached").end())
            detached.start()
            detached.join()
    return 1.0


@agl.rollout
async def sleeps_async(task: Any, prompt_template: agl.PromptTemplate) -> float:
    import asyncio

    await asyncio.sleep(3600)  # stands for a hung async agent: cancelled at its timeout or the runner's stop
    return 0.0


@agl.rollout
def returns_store_spans(task: Any, prompt_template: agl.PromptTemplate, rollout: agl.AttemptedRollout) -> list:
    return [
        agl.Span(
            rollout_id=rollout.rollout_id,
            attempt_id=rollout.attempt.attempt_id,
            sequence_id=1,
            trace_id="ab" * 16,
            span_id="cd" * 8,
            name="custom.step",
            attributes={"k": "v"},
            start_time=1.0,
        )
    ]


@agl.rollout
def returns_otel_spans(task: Any, prompt_template: agl.PromptTemplate) -> list:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("user").start_as_current_span("user.work") as span:
        span.set_attribute("n", 3)
    return list(exporter.get_finished_spans())


@agl.rollout
async def raises_its_own_timeout(task: Any, prompt_template: agl.PromptTemplate) -> float:
    raise TimeoutError("the agent's own HTTP call timed out")


@agl.rollout
def agl_env_agent(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> None:
    """An Agent Lightning 1.0-style agent: it knows nothing but the three AGL_* variables."""
    agl_env_call(task)


@agl.rollout
def agl_env_agent_without_resources(task: dict[str, Any], resources: agl.NamedResources) -> None:
    """The same, run where no resources were ever published (AL 1.0 agents use none)."""
    assert resources == {}, resources
    agl_env_call(task)


def agl_env_call(task: dict[str, Any]) -> None:
    """Ask the gateway the question, post the reward to the events URL."""
    import httpx
    import openai

    key = os.environ["AGL_KEY"]  # as AL 1.0's calc_x and gsm8k agents read it: the openai client refuses ""
    client = openai.OpenAI(base_url=os.environ["AGL_OPENAI_BASE_URL"], api_key=key)
    reply = client.chat.completions.create(model="any", messages=[{"role": "user", "content": task["question"]}])
    reward = 1.0 if reply.choices[0].message.content == str(task["answer"]) else 0.0
    event = {"event_type": "reward", "data": {"value": reward}}
    httpx.post(os.environ["AGL_EVENT_URL"], json=event, headers={"Authorization": f"Bearer {key}"}).raise_for_status()
