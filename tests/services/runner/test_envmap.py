"""``env_map`` resolves as Agent Lightning 1.0's local controller does (``_build_env_from_map`` and
``_resolve_input_path`` in ``controller/local_reconciler.py``): the cases below were checked against that code."""

from __future__ import annotations

from typing import Any

import pytest

from voltbus.services.runner.envmap import EnvMapError, env_from_map

TASK = {"question": "6*7", "answer": 42, "ok": True, "none": None, "text": "é", "nested": {"a": [1, {"b": 2}]}}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("input.question", "6*7"),  # a string as it is
        ("input.answer", "42"),  # anything else as JSON
        ("input.ok", "true"),
        ("input.none", "null"),
        ("input.text", "é"),
        ("input.nested", '{"a": [1, {"b": 2}]}'),
        ("input.nested.a.1", '{"b": 2}'),  # list indexes
        ("input.nested.a.1.b", "2"),
        (
            "input",
            '{"question": "6*7", "answer": 42, "ok": true, "none": null, "text": "é", "nested": {"a": [1, {"b": 2}]}}',
        ),
        ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"),  # not input...: a literal (gsm8k's GSM8K_MODEL)
        ("inputs.question", "inputs.question"),  # "input" must be followed by a dot
        ("", ""),
    ],
)
def test_a_path_gives_the_value_as_agent_lightning_1_0_does(path: str, value: str) -> None:
    assert env_from_map(TASK, {"V": path}) == {"V": value}


@pytest.mark.parametrize(
    "path", ["input.missing", "input.nested.a.2", "input.nested.a.x", "input.nested.a.-1", "input.question.0", "input."]
)
def test_a_path_the_task_lacks_fails_with_its_name(path: str) -> None:
    with pytest.raises(EnvMapError, match=f"^env_map path not found: {path}$"):
        env_from_map(TASK, {"V": path})


def test_a_task_that_is_not_an_object_resolves_as_a_whole() -> None:
    assert env_from_map("plain", {"A": "input", "B": "lit"}) == {"A": "plain", "B": "lit"}
    assert env_from_map([10, 20], {"A": "input.1"}) == {"A": "20"}


@pytest.mark.parametrize(("name", "path"), [("", "input.question"), ("A=B", "input.question"), ("A\x00", "x")])
def test_a_name_no_environment_can_hold_is_refused(name: str, path: str) -> None:
    with pytest.raises(EnvMapError, match="not a valid environment variable name"):
        env_from_map(TASK, {name: path})


def test_a_value_with_a_nul_byte_is_refused() -> None:
    task: dict[str, Any] = {"q": "a\x00b"}
    with pytest.raises(EnvMapError, match="NUL byte"):
        env_from_map(task, {"Q": "input.q"})
