"""Loading the user's agent from ``module:attr``, with one clear line when it does not resolve."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path
from types import ModuleType
from typing import Any

from voltbus.agent.decorators import rollout
from voltbus.agent.litagent import LitAgent
from voltbus.schemas.errors import VoltbusError


class AgentLoadError(VoltbusError):
    """The agent path does not name a usable agent."""


def _import(module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentLoadError(f"cannot import agent module {module_name!r}: {exc}") from None


def _load_file(file: str) -> ModuleType:
    location = Path(file)
    if not location.is_file():
        raise AgentLoadError(f"agent file {file!r} does not exist")
    spec = importlib.util.spec_from_file_location(f"voltbus_agent_{location.stem}", location)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_agent(path: str) -> LitAgent[Any]:
    """The agent at ``module:attr`` or ``file.py:attr``: a LitAgent instance or class, or a rollout function."""
    module_name, _, attr = path.rpartition(":")
    if not module_name or not attr:
        raise AgentLoadError(f"agent {path!r} must look like 'package.module:name' or 'path/to/file.py:name'")
    module = _load_file(module_name) if module_name.endswith(".py") else _import(module_name)
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
