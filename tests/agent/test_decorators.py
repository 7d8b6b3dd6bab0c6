"""Function agents: @rollout, @llm_rollout, @prompt_rollout and injection of arguments by parameter name."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from voltbus.schemas.resources import LLM, GenericResource, PromptTemplate, ProxyLLM
from voltbus.services.clients.agent.decorators import FunctionalLitAgent, llm_rollout, prompt_rollout, rollout
from voltbus.services.clients.agent.litagent import LitAgent
from voltbus.services.clients.store.types import Attempt, AttemptedRollout, NamedResources, Rollout

ATTEMPTED = AttemptedRollout(
    rollout_id="ro-1",
    input="q",
    start_time=0.0,
    attempt=Attempt(rollout_id="ro-1", attempt_id="at-1", sequence_id=1, start_time=0.0),
)
PLAIN = Rollout(rollout_id="ro-1", input="q", start_time=0.0)
MAIN = LLM(endpoint="http://h:1/v1", model="main")
PROXY = ProxyLLM(endpoint="http://gw:9/v1", model="proxied", sampling_parameters={"temperature": 0.5}, api_key="k")
PROMPT = PromptTemplate(template="Q: {q}")


# Decoration: forms and validation.


def test_llm_rollout_with_and_without_parentheses() -> None:
    def agent(task: str, llm: LLM) -> str:
        """Docs."""
        return f"{task}@{llm.model}"

    for wrapped in (llm_rollout(agent), llm_rollout()(agent), llm_rollout(strip_proxy=False)(agent)):
        assert isinstance(wrapped, FunctionalLitAgent) and isinstance(wrapped, LitAgent)
        assert wrapped.__name__ == "agent" and wrapped.__doc__ == "Docs." and wrapped.__wrapped__ is agent
        assert wrapped("t", MAIN) == "t@main"  # calling it calls the function unchanged
        assert wrapped.rollout("t", {"main": MAIN}, ATTEMPTED) == "t@main"


def test_prompt_rollout_with_and_without_parentheses() -> None:
    def agent(task: str, prompt_template: PromptTemplate) -> str:
        return prompt_template.format(q=task)

    for wrapped in (prompt_rollout(agent), prompt_rollout()(agent)):
        assert isinstance(wrapped, FunctionalLitAgent)
        assert wrapped.rollout("2+2", {"p": PROMPT}, PLAIN) == "Q: 2+2"


@pytest.mark.parametrize(
    ("decorate", "name"),
    [(llm_rollout, "llm"), (prompt_rollout, "prompt_template")],
)
def test_decoration_time_validation(decorate: Any, name: str) -> None:
    def one(task: str) -> None: ...

    def wrong_first(question: str, llm: LLM, prompt_template: PromptTemplate) -> None: ...

    def missing(task: str, other: object) -> None: ...

    with pytest.raises(ValueError, match=r"^Function .*one.* must have at least 2 parameters\.$"):
        decorate(one)
    with pytest.raises(ValueError, match=r"must be a positional parameter called 'task'\.$"):
        decorate(wrong_first)
    with pytest.raises(ValueError, match=rf"must have a positional parameter called '{name}'\.$"):
        decorate(missing)


def test_rollout_detects_each_pattern() -> None:
    def with_llm(task: str, llm: LLM, rollout: Rollout) -> str:
        return llm.endpoint

    def with_prompt(task: str, prompt_template: PromptTemplate) -> str:
        return prompt_template.template

    def with_resources(task: str, resources: NamedResources) -> list[str]:
        return sorted(resources)

    resources: NamedResources = {"proxy": PROXY, "p": PROMPT}
    assert rollout(with_llm).rollout("t", resources, ATTEMPTED) == "http://gw:9/rollout/ro-1/attempt/at-1/v1"
    assert rollout(with_prompt).rollout("t", resources, PLAIN) == "Q: {q}"
    assert rollout(with_resources).rollout("t", resources, PLAIN) == ["p", "proxy"]


def test_rollout_rejects_unknown_signatures() -> None:
    def agent(task: str, model: str) -> None: ...

    with pytest.raises(
        NotImplementedError, match=r"^Function signature \(task: 'str', model: 'str'\) -> 'None' does not"
    ):
        rollout(agent)
    with pytest.raises(NotImplementedError, match="does not match any known agent patterns"):
        rollout(lambda llm, task: None)
    with pytest.raises(NotImplementedError):
        rollout(lambda task: None)


# Call time: injection.


def test_injection_by_name_with_task_positional() -> None:
    seen: dict[str, Any] = {}

    @rollout
    def agent(task: str, rollout: Rollout, prompt_template: PromptTemplate, resources: NamedResources, llm: LLM):
        seen.update(task=task, rollout=rollout, prompt_template=prompt_template, resources=resources, llm=llm)

    resources: NamedResources = {"g": GenericResource(value=b"1"), "p": PROMPT, "m": MAIN}
    assert agent.rollout("the task", resources, ATTEMPTED) is None
    assert seen == {
        "task": "the task",
        "rollout": ATTEMPTED,
        "prompt_template": PROMPT,
        "resources": resources,
        "llm": MAIN,
    }
    assert seen["resources"] is resources


def test_only_requested_arguments_are_passed() -> None:
    @llm_rollout
    def agent(task: str, llm: LLM) -> str:
        return llm.model

    # A missing prompt template or an unknown resource does not matter when the function does not ask for it.
    assert agent.rollout("t", {"m": MAIN, "g": GenericResource(value=b"{}")}, PLAIN) == "main"


def test_first_llm_in_dict_order_wins_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    @llm_rollout(strip_proxy=False)
    def agent(task: str, llm: LLM) -> LLM:
        return llm

    with caplog.at_level(logging.WARNING, logger="voltbus.services.clients.agent.decorators"):
        assert agent.rollout("t", {"p": PROMPT, "first": MAIN, "second": PROXY}, ATTEMPTED) is MAIN
    assert "Multiple LLM resources found in resources. Using the first one: 'first'." in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="voltbus.services.clients.agent.decorators"):
        assert agent.rollout("t", {"first": PROXY, "second": MAIN}, PLAIN) is PROXY  # a ProxyLLM is an LLM
    assert "Using the first one: 'first'." in caplog.text


def test_first_prompt_template_wins_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    second = PromptTemplate(template="{{ q }}", engine="jinja")

    @prompt_rollout
    def agent(task: str, prompt_template: PromptTemplate) -> PromptTemplate:
        return prompt_template

    with caplog.at_level(logging.WARNING, logger="voltbus.services.clients.agent.decorators"):
        assert agent.rollout("t", {"m": MAIN, "a": PROMPT, "b": second}, PLAIN) is PROMPT
    assert "Multiple prompt template resources found in resources. Using the first one: 'a'." in caplog.text


def test_missing_resources_raise_at_call_time() -> None:
    @rollout
    def needs_llm(task: str, llm: LLM) -> None: ...

    @rollout
    def needs_prompt(task: str, prompt_template: PromptTemplate) -> None: ...

    with pytest.raises(ValueError, match=r"^No LLM resource found in the provided resources\.$"):
        needs_llm.rollout("t", {"p": PROMPT}, ATTEMPTED)
    with pytest.raises(ValueError, match=r"^No prompt template resource found in the provided resources\.$"):
        needs_prompt.rollout("t", {"m": MAIN}, PLAIN)


def test_strip_proxy_scopes_the_endpoint_to_the_attempt() -> None:
    @llm_rollout
    def agent(task: str, llm: LLM) -> LLM:
        return llm

    llm = agent.rollout("t", {"proxy": PROXY}, ATTEMPTED)
    assert type(llm) is LLM
    assert llm == LLM(
        endpoint="http://gw:9/rollout/ro-1/attempt/at-1/v1",
        model="proxied",
        sampling_parameters={"temperature": 0.5},
        api_key="k",
    )


def test_strip_proxy_needs_an_attempted_rollout() -> None:
    @llm_rollout
    def agent(task: str, llm: LLM) -> None: ...

    with pytest.raises(ValueError, match=r"^Rollout is not an AttemptedRollout\.$"):
        agent.rollout("t", {"proxy": PROXY}, PLAIN)
    agent.rollout("t", {"main": MAIN}, PLAIN)  # a plain LLM needs no attempt


def test_without_strip_proxy_the_proxy_is_passed_as_is() -> None:
    @llm_rollout(strip_proxy=False)
    def agent(task: str, llm: LLM) -> LLM:
        return llm

    assert agent.rollout("t", {"proxy": PROXY}, PLAIN) is PROXY


def test_resources_are_passed_unstripped() -> None:
    @llm_rollout
    def agent(task: str, llm: LLM, resources: NamedResources) -> tuple[LLM, NamedResources]:
        return llm, resources

    llm, resources = agent.rollout("t", {"proxy": PROXY}, ATTEMPTED)
    assert type(llm) is LLM and resources == {"proxy": PROXY}


# Sync and async.


async def test_async_agent() -> None:
    @rollout
    async def agent(task: str, llm: LLM, rollout: Rollout) -> float:
        return 1.0 if llm.endpoint.endswith("/at-1/v1") and rollout is ATTEMPTED else 0.0

    assert agent.is_async()
    assert await agent.rollout_async("t", {"proxy": PROXY}, ATTEMPTED) == 1.0
    assert await agent.training_rollout_async("t", {"proxy": PROXY}, ATTEMPTED) == 1.0
    assert await agent.validation_rollout_async("t", {"proxy": PROXY}, ATTEMPTED) == 1.0
    with pytest.raises(RuntimeError, match=r"is asynchronous\. Use rollout_async instead\.$"):
        agent.rollout("t", {"proxy": PROXY}, ATTEMPTED)
    assert await agent("t", MAIN, PLAIN) == 0.0  # calling it returns the coroutine of the raw function


async def test_sync_agent() -> None:
    @prompt_rollout
    def agent(task: str, prompt_template: PromptTemplate) -> str:
        return prompt_template.format(q=task)

    assert not agent.is_async()
    assert agent.training_rollout("x", {"p": PROMPT}, PLAIN) == "Q: x"
    assert agent.validation_rollout("y", {"p": PROMPT}, PLAIN) == "Q: y"
    with pytest.raises(RuntimeError, match=r"is synchronous\. Use rollout instead\.$"):
        await agent.rollout_async("x", {"p": PROMPT}, PLAIN)


def test_functional_agent_can_be_built_directly() -> None:
    agent = FunctionalLitAgent(lambda task, resources: len(resources))
    assert agent.rollout("t", {"a": MAIN, "b": PROMPT}, PLAIN) == 2
    assert agent.is_async() is False
