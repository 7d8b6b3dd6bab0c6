"""Decorators that turn a plain function into a ``LitAgent`` (Agent Lightning 0.3's ``litagent/decorator.py``).

The function receives the task positionally and, by parameter name, ``llm``, ``prompt_template``, ``rollout``
and (a voltbus addition) ``resources``.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, TypeVar, overload

from voltbus.schemas.resources import LLM, PromptTemplate, ProxyLLM
from voltbus.services.clients.agent.litagent import LitAgent, RolloutRawResult
from voltbus.services.clients.store.types import AttemptedRollout, NamedResources, Rollout

T = TypeVar("T")

__all__ = ["FunctionalLitAgent", "llm_rollout", "prompt_rollout", "rollout"]

logger = logging.getLogger(__name__)

RolloutFunc = Callable[..., Any]
"""A rollout function: ``(task, <injected by name>...)``, sync or async."""


class FunctionalLitAgent(LitAgent[T]):
    """A ``LitAgent`` around a rollout function; calling it calls the function unchanged."""

    def __init__(self, rollout_func: RolloutFunc, *, strip_proxy: bool = True) -> None:
        """Wrap ``rollout_func``; with ``strip_proxy`` a ``ProxyLLM`` reaches it as an attempt-scoped ``LLM``."""
        super().__init__()
        self._rollout_func = rollout_func
        self._strip_proxy = strip_proxy
        self._is_async = inspect.iscoroutinefunction(rollout_func)
        self._params = inspect.signature(rollout_func).parameters
        functools.update_wrapper(self, rollout_func)  # type: ignore[arg-type]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function with the arguments as given."""
        return self._rollout_func(*args, **kwargs)

    def is_async(self) -> bool:
        """True when the wrapped function is a coroutine function."""
        return self._is_async

    def rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Run a synchronous function with its arguments injected; RuntimeError for an async one."""
        if self._is_async:
            raise RuntimeError(f"{self._rollout_func} is asynchronous. Use rollout_async instead.")
        return self._rollout_func(task, **self._get_kwargs(resources, rollout))

    async def rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Await an async function with its arguments injected; RuntimeError for a sync one."""
        if not self._is_async:
            raise RuntimeError(f"{self._rollout_func} is synchronous. Use rollout instead.")
        return await self._rollout_func(task, **self._get_kwargs(resources, rollout))

    def _get_kwargs(self, resources: NamedResources, rollout: Rollout) -> dict[str, Any]:
        """The keyword arguments the function's parameter names ask for."""
        kwargs: dict[str, Any] = {}
        if "rollout" in self._params:
            kwargs["rollout"] = rollout
        if "resources" in self._params:
            kwargs["resources"] = resources
        if "llm" in self._params:
            kwargs["llm"] = self._get_llm(resources, rollout)
        if "prompt_template" in self._params:
            kwargs["prompt_template"] = _first_of(resources, PromptTemplate, "prompt template")
        return kwargs

    def _get_llm(self, resources: NamedResources, rollout: Rollout) -> LLM:
        """The first LLM (a ProxyLLM counts), scoped to the attempt when it is a proxy and ``strip_proxy`` is on."""
        llm = _first_of(resources, LLM, "LLM")
        if not self._strip_proxy or not isinstance(llm, ProxyLLM):
            return llm
        if not isinstance(rollout, AttemptedRollout):
            raise ValueError("Rollout is not an AttemptedRollout.")
        return llm.with_attempted_rollout(rollout)


R = TypeVar("R", LLM, PromptTemplate)


def _first_of(resources: NamedResources, kind: type[R], label: str) -> R:
    """The first resource of ``kind`` in dict order; a warning when there are more, ValueError when none."""
    found = [(name, r) for name, r in resources.items() if isinstance(r, kind)]
    if not found:
        raise ValueError(f"No {label} resource found in the provided resources.")
    if len(found) > 1:
        # Agent Lightning's message names the second resource; this one names the one actually used.
        logger.warning("Multiple %s resources found in resources. Using the first one: '%s'.", label, found[0][0])
    return found[0][1]


def _validate(func: RolloutFunc, injected: str) -> None:
    """ValueError unless ``func`` takes ``task`` first and a parameter named ``injected``."""
    params = list(inspect.signature(func).parameters)
    if len(params) < 2:
        raise ValueError(f"Function {func} must have at least 2 parameters.")
    if params[0] != "task":
        raise ValueError(f"Function {func} must be a positional parameter called 'task'.")
    if injected not in params:
        raise ValueError(f"Function {func} must have a positional parameter called '{injected}'.")


@overload
def llm_rollout(func: RolloutFunc, *, strip_proxy: bool = True) -> FunctionalLitAgent[Any]: ...


@overload
def llm_rollout(*, strip_proxy: bool = True) -> Callable[[RolloutFunc], FunctionalLitAgent[Any]]: ...


def llm_rollout(
    func: RolloutFunc | None = None, *, strip_proxy: bool = True
) -> FunctionalLitAgent[Any] | Callable[[RolloutFunc], FunctionalLitAgent[Any]]:
    """Make an agent of ``(task, llm[, rollout])``; usable as ``@llm_rollout`` or ``@llm_rollout(strip_proxy=...)``."""

    def decorator(f: RolloutFunc) -> FunctionalLitAgent[Any]:
        _validate(f, "llm")
        return FunctionalLitAgent(f, strip_proxy=strip_proxy)

    return decorator if func is None else decorator(func)


@overload
def prompt_rollout(func: RolloutFunc) -> FunctionalLitAgent[Any]: ...


@overload
def prompt_rollout() -> Callable[[RolloutFunc], FunctionalLitAgent[Any]]: ...


def prompt_rollout(
    func: RolloutFunc | None = None,
) -> FunctionalLitAgent[Any] | Callable[[RolloutFunc], FunctionalLitAgent[Any]]:
    """Make an agent of ``(task, prompt_template[, rollout])``; as ``@prompt_rollout`` or ``@prompt_rollout()``."""

    def decorator(f: RolloutFunc) -> FunctionalLitAgent[Any]:
        _validate(f, "prompt_template")
        return FunctionalLitAgent(f)

    return decorator if func is None else decorator(func)


def rollout(func: RolloutFunc) -> FunctionalLitAgent[Any]:
    """Make an agent of a function taking ``task`` first and ``llm``, ``prompt_template`` or ``resources``.

    NotImplementedError when the signature matches none of them.
    """
    for injected in ("llm", "prompt_template", "resources"):
        try:
            _validate(func, injected)
        except ValueError:
            continue
        return FunctionalLitAgent(func)
    raise NotImplementedError(
        f"Function signature {inspect.signature(func)} does not match any known agent patterns. "
        "Expected signatures: (task, llm[, rollout]), (task, prompt_template[, rollout]) or "
        "(task, resources[, rollout]), sync or async"
    )
