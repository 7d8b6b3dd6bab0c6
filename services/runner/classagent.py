"""Agent Lightning 1.0's agent classes: ``Class().run()``, awaited when it returns an awaitable, as AL 1.0's
local controller runs them; the agent reads its task and endpoints from ``AGL_*`` and ``env_map`` variables."""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Awaitable
from typing import Any

from voltbus.schemas.errors import VoltbusError
from voltbus.services.clients.agent.litagent import LitAgent
from voltbus.services.clients.store.types import NamedResources, Rollout

NEEDS = ("AGL_OPENAI_BASE_URL", "AGL_EVENT_URL", "AGL_KEY")
"""The variables an AL 1.0 agent reads (``isolate.agl_environment`` sets them)."""


class NotIsolated(VoltbusError):
    """An AL 1.0 agent class ran where no ``AGL_*`` variables were set (not an isolated runner with a gateway)."""


def is_agent_class(target: Any) -> bool:
    """Whether ``target`` is a class AL 1.0's controller can run: one with a ``run`` method."""
    return inspect.isclass(target) and callable(getattr(target, "run", None))


async def _wait(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class ClassAgent(LitAgent[Any]):
    """Runs ``cls().run()`` once per rollout, in the rollout's worker thread; an awaitable result runs on an
    event loop of its own (``asyncio.run``), as in AL 1.0's fresh process. Its return value is not a reward:
    the agent posts its reward to ``AGL_EVENT_URL``."""

    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def is_async(self) -> bool:
        """Never: ``run`` gets a thread (and, when async, a loop) of its own."""
        return False

    def rollout(self, task: Any, resources: NamedResources, rollout: Rollout) -> None:
        """``cls().run()``; NotIsolated when the ``AGL_*`` variables it reads are not set."""
        missing = [name for name in NEEDS if name not in os.environ]
        if missing:
            raise NotIsolated(
                f"{self.cls.__qualname__} is an Agent Lightning 1.0 agent class: it reads {', '.join(missing)}, which "
                "only an isolated runner with a gateway sets (voltbus runner --isolate, runner.gateway_url)"
            )
        result = self.cls().run()
        if inspect.isawaitable(result):
            asyncio.run(_wait(result))
