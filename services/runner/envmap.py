"""A rollout's ``env_map`` (environment variable → task field), as Agent Lightning 1.0's local controller
resolves ``RolloutLocalConfig.env_map`` for each agent process (``controller/local_reconciler.py``).

Pure functions: ``env_from_map(task, env_map)`` gives the variables, EnvMapError says which entry fails.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from voltbus.schemas.errors import InvalidCommand


class EnvMapError(InvalidCommand):
    """An ``env_map`` entry names a task field the task does not have, or a variable no process can carry."""


def resolve(task: Any, path: str) -> Any:
    """What ``path`` names: ``"input"`` the whole task, ``"input.a.0.b"`` a field (dict keys, list indexes);
    anything else is a literal value, as in AL 1.0.

    >>> task = {"question": "6*7", "nested": {"a": [1, {"b": 2}]}}
    >>> resolve(task, "input.question"), resolve(task, "input.nested.a.1"), resolve(task, "Qwen/Qwen2.5")
    ('6*7', {'b': 2}, 'Qwen/Qwen2.5')
    >>> resolve(task, "input.nested.a.2")
    Traceback (most recent call last):
    ...
    voltbus.services.runner.envmap.EnvMapError: env_map path not found: input.nested.a.2
    """
    if path == "input":
        return task
    if not path.startswith("input."):
        return path
    value = task
    for part in path.split(".")[1:]:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise EnvMapError(f"env_map path not found: {path}")
    return value


def as_text(value: Any) -> str:
    """A variable's text: a string as it is, any other value as JSON (``ensure_ascii=False``, as AL 1.0).

    >>> as_text("é"), as_text(42), as_text(True), as_text(None), as_text({"a": ["é"]})
    ('é', '42', 'true', 'null', '{"a": ["é"]}')
    """
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def env_from_map(task: Any, env_map: Mapping[str, str]) -> dict[str, str]:
    """The environment variables ``env_map`` gives for ``task``; EnvMapError for a missing field or a name
    or value a process environment cannot hold (empty, ``=`` in a name, a NUL byte).

    >>> env_from_map({"question": "6*7", "answer": 42}, {"QUESTION": "input.question", "ANSWER": "input.answer"})
    {'QUESTION': '6*7', 'ANSWER': '42'}
    >>> env_from_map({}, {"A=B": "x"})
    Traceback (most recent call last):
    ...
    voltbus.services.runner.envmap.EnvMapError: env_map variable name 'A=B' is not a valid environment variable name
    """
    env: dict[str, str] = {}
    for name, path in env_map.items():
        if not name or "=" in name or "\x00" in name:
            raise EnvMapError(f"env_map variable name {name!r} is not a valid environment variable name")
        text = as_text(resolve(task, path))
        if "\x00" in text:
            raise EnvMapError(f"env_map.{name}: the value of {path} holds a NUL byte, which no environment can carry")
        env[name] = text
    return env
