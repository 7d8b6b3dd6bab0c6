"""Loading the user's agent from ``module:attr``, with one clear line when it does not resolve."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from voltbus.schemas.errors import VoltbusError
from voltbus.services.clients.agent.decorators import FunctionalLitAgent, rollout
from voltbus.services.clients.agent.litagent import LitAgent

from .classagent import ClassAgent, is_agent_class


class AgentLoadError(VoltbusError):
    """The agent path does not name a usable agent."""


def _failed(module_name: str, exc: Exception) -> AgentLoadError:
    """One line for a module that cannot be imported: a missing module, a syntax error (its message names
    the file and line), or any exception its code raised while it ran (with where it was raised)."""
    if isinstance(exc, ImportError):
        reason = str(exc)
    else:
        reason = f"{type(exc).__name__}: {exc}"
        frames = [] if isinstance(exc, SyntaxError) else traceback.extract_tb(exc.__traceback__)
        if frames:
            reason += f" (at {frames[-1].filename}:{frames[-1].lineno})"
    return AgentLoadError(f"cannot import agent module {module_name!r}: {reason}")


def _import(module_name: str) -> ModuleType:
    """Import the agent's module; the current folder is searched too (after everything else, so it shadows no
    installed package), as ``python -m`` does: ``voltbus runner --agent room:agent`` from the agent's folder."""
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        raise _failed(module_name, exc) from None


def _load_file(file: str) -> ModuleType:
    location = Path(file)
    if not location.is_file():
        raise AgentLoadError(f"agent file {file!r} does not exist")
    name = f"voltbus_agent_{location.stem}"
    spec = importlib.util.spec_from_file_location(name, location)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import does: dataclasses, pickle and typing look the module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise _failed(file, exc) from None
    return module


def takes_task_only(func: Any) -> bool:
    """Whether ``func`` can be called with the task alone (``def agent(task)``).

    >>> takes_task_only(lambda task: None), takes_task_only(lambda task, llm: None), takes_task_only(len)
    (True, False, True)
    """
    try:
        inspect.signature(func).bind(None)
    except (TypeError, ValueError):
        return False
    return True


def load_agent(path: str) -> LitAgent[Any]:
    """The agent at ``module:attr``, ``file.py:attr`` or (Agent Lightning 1.0's form) ``module.Class``: a LitAgent
    instance or class, an AL 1.0 agent class (``Class().run()``), or a rollout function (``def agent(task)`` too)."""
    dotted = ":" not in path and not path.endswith(".py")  # AL 1.0's agent_class form
    module_name, _, attr = path.rpartition(".") if dotted else path.rpartition(":")
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
    if is_agent_class(target):
        return ClassAgent(target)
    if callable(target):
        try:
            return rollout(target)
        except (NotImplementedError, ValueError, TypeError) as exc:  # a signature no agent pattern matches
            if takes_task_only(target):
                return FunctionalLitAgent(target)
            raise AgentLoadError(f"{path!r} is not a usable rollout function: {exc}") from None
    raise AgentLoadError(f"{path!r} is a {type(target).__name__}, not a LitAgent or a rollout function")
