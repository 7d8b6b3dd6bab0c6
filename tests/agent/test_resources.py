"""The resource Structs' pure helpers: LLM/ProxyLLM base URLs and PromptTemplate.format (f-string and jinja)."""

from __future__ import annotations

import jinja2
import msgspec
import pytest

from voltbus.schemas.resources import LLM, PromptTemplate, ProxyLLM, Resource, WeightsRef
from voltbus.services.clients.store.types import Attempt, AttemptedRollout


def attempted(rollout_id: str = "ro-1", attempt_id: str = "at-1") -> AttemptedRollout:
    attempt = Attempt(rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=1, start_time=0.0)
    return AttemptedRollout(rollout_id=rollout_id, input="task", start_time=0.0, attempt=attempt)


def test_llm_base_url_ignores_its_arguments() -> None:
    llm = LLM(endpoint="http://h:1/v1/", model="m")
    assert llm.get_base_url() == "http://h:1/v1/"
    assert llm.get_base_url("ro-1", "at-1") == "http://h:1/v1/"
    assert llm.get_base_url(rollout_id="ro-1", attempt_id="at-1", extra=3) == "http://h:1/v1/"


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("http://h:1/v1", "http://h:1/rollout/ro-1/attempt/at-1/v1"),
        ("http://h:1/v1/", "http://h:1/rollout/ro-1/attempt/at-1/v1"),
        ("http://h:1", "http://h:1/rollout/ro-1/attempt/at-1"),
        ("http://h:1/", "http://h:1/rollout/ro-1/attempt/at-1"),
        ("http://h:1/api/v1", "http://h:1/api/rollout/ro-1/attempt/at-1/v1"),
        ("http://h:1/v1beta", "http://h:1/v1beta/rollout/ro-1/attempt/at-1"),
        ("http://h:1/v1//", "http://h:1/v1//rollout/ro-1/attempt/at-1"),
    ],
)
def test_proxy_base_url_shapes(endpoint: str, expected: str) -> None:
    assert ProxyLLM(endpoint=endpoint, model="m").get_base_url("ro-1", "at-1") == expected
    assert ProxyLLM(endpoint=endpoint, model="m").get_base_url(rollout_id="ro-1", attempt_id="at-1") == expected


def test_proxy_base_url_without_ids_is_the_raw_endpoint() -> None:
    proxy = ProxyLLM(endpoint="http://h:1/v1/", model="m")
    assert proxy.get_base_url() == "http://h:1/v1/"
    assert proxy.get_base_url(None, None) == "http://h:1/v1/"


@pytest.mark.parametrize(("rollout_id", "attempt_id"), [("ro-1", None), (None, "at-1"), ("ro-1", 7), (1, 2)])
def test_proxy_base_url_needs_both_ids_as_strings(rollout_id: object, attempt_id: object) -> None:
    proxy = ProxyLLM(endpoint="http://h:1/v1", model="m")
    with pytest.raises(ValueError, match="^rollout_id and attempt_id must be strings or all be empty$"):
        proxy.get_base_url(rollout_id, attempt_id)  # type: ignore[arg-type]


def test_with_attempted_rollout_is_a_plain_llm_scoped_to_the_attempt() -> None:
    weights = WeightsRef(uri="file:///w", sha256="0" * 64)
    proxy = ProxyLLM(
        endpoint="http://h:1/v1",
        model="qwen",
        sampling_parameters={"temperature": 0.7, "max_tokens": 64},
        api_key="sk-1",
        weights=weights,
    )
    llm = proxy.with_attempted_rollout(attempted("ro-9", "at-3"))
    assert type(llm) is LLM
    assert llm == LLM(
        endpoint="http://h:1/rollout/ro-9/attempt/at-3/v1",
        model="qwen",
        sampling_parameters={"temperature": 0.7, "max_tokens": 64},
        api_key="sk-1",
        weights=weights,
    )
    assert msgspec.json.decode(msgspec.json.encode(llm), type=Resource) == llm  # tagged "llm", not "proxy_llm"
    assert llm.get_base_url("other", "ids") == llm.endpoint


def test_helpers_leave_the_wire_format_unchanged() -> None:
    proxy = ProxyLLM(endpoint="http://h:1/v1", model="m")
    assert msgspec.json.decode(msgspec.json.encode(proxy)) == {
        "resource_type": "proxy_llm",
        "endpoint": "http://h:1/v1",
        "model": "m",
        "sampling_parameters": {},
        "api_key": None,
        "weights": None,
    }


def test_fstring_format() -> None:
    template = PromptTemplate(template="Q: {question} ({n} tries) {{literal}}", engine="f-string")
    assert template.format(question="2+2?", n=3) == "Q: 2+2? (3 tries) {literal}"
    assert PromptTemplate(template="{x}").format(x=1, unused=2) == "1"  # f-string is the default engine


def test_fstring_missing_variable_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="question"):
        PromptTemplate(template="Q: {question}").format()


def test_jinja_format_with_loops_and_filters() -> None:
    template = PromptTemplate(
        template=(
            "Task: {{ task | trim | capitalize }}\n"
            "{% for ex in examples %}{{ loop.index }}. {{ ex.q }} -> {{ ex.a | upper }}\n{% endfor %}"
            "{{ tools | join(', ') | default('none', true) }}\n"
        ),
        engine="jinja",
    )
    rendered = template.format(
        task="  add numbers ", examples=[{"q": "1+1", "a": "two"}, {"q": "2+2", "a": "four"}], tools=[]
    )
    assert rendered == "Task: Add numbers\n1. 1+1 -> TWO\n2. 2+2 -> FOUR\nnone\n"


def test_jinja_conditionals_and_literal_braces() -> None:
    template = PromptTemplate(template="{% if hint %}Hint: {{ hint }}{% else %}No hint{% endif %} {x}", engine="jinja")
    assert template.format(hint="think") == "Hint: think {x}"
    assert template.format(hint="") == "No hint {x}"


def test_jinja_keeps_text_verbatim() -> None:
    assert PromptTemplate(template="<b>{{ x }}</b>\n", engine="jinja").format(x="a & b") == "<b>a & b</b>\n"


def test_jinja_missing_variable_is_an_error() -> None:
    template = PromptTemplate(template="Q: {{ question }}", engine="jinja")
    with pytest.raises(jinja2.UndefinedError, match="'question' is undefined"):
        template.format()
    with pytest.raises(jinja2.UndefinedError):
        PromptTemplate(template="{{ q.missing }}", engine="jinja").format(q={})
    with pytest.raises(jinja2.UndefinedError):
        PromptTemplate(template="{% for x in xs %}{{ x }}{% endfor %}", engine="jinja").format()


def test_jinja_is_sandboxed() -> None:
    template = PromptTemplate(template="{{ x.__class__.__mro__ }}", engine="jinja")
    with pytest.raises(jinja2.exceptions.SecurityError):
        template.format(x="")


def test_jinja_syntax_error_surfaces() -> None:
    with pytest.raises(jinja2.TemplateSyntaxError):
        PromptTemplate(template="{% for x in %}", engine="jinja").format()


def test_poml_is_not_implemented() -> None:
    template = PromptTemplate(template="<poml><p>{{ q }}</p></poml>", engine="poml")
    with pytest.raises(NotImplementedError, match="engine 'poml' is not supported; use 'f-string' or 'jinja'"):
        template.format(q="x")
