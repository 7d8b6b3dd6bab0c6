"""Loading the user's agent from ``module:attr``, with one clear line when it does not resolve."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from voltbus.agent.decorators import rollout
from voltbus.agent.litagent import LitAgent
from voltbus.schemas.errors import VoltbusError


class AgentLoadError(VoltbusError):
    """The agent path does not name a usable agent."""


def load_agent(path: str) -> LitAgent[Any]:
    """The agent at ``module:attr``: a LitAgent instance or class, or a rollout function (wrapped)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise AgentLoadError(f"agent {path!r} must look like 'package.module:name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentLoadError(f"cannot import agent module {module_name!r}: {exc}") from None
    try:
        target = getattr(module, attr)
    except AttributeError:
        raise AgentLoadError(f"module {module_name!r} has no attribute {attr!r}") from None
    if isinstance(target, LitAgent):
        return target
    if inspect.isclass(target) and issubclass(target, LitAgent):
        return target()
    if callable(target):
        return rollout(target)
    raise AgentLoadError(f"{path!r} is a {type(target).__name__}, not a LitAgent or a rollout function")
