"""Agent Lightning's ``emitter`` module: the emitters, reward readers and ``operation`` (``voltbus.agent``'s), and the
``reward`` decorator (its ``emitter/reward.py``): a function's returned number is emitted as a reward span."""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from voltbus.agent import (
    emit_annotation,
    emit_exception,
    emit_message,
    emit_object,
    emit_reward,
    find_final_reward,
    find_reward_spans,
    get_message_value,
    get_object_value,
    get_reward_value,
    get_rewards_from_span,
    is_reward_span,
    operation,
)

__all__ = [
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_reward",
    "find_final_reward",
    "find_reward_spans",
    "get_message_value",
    "get_object_value",
    "get_reward_value",
    "get_rewards_from_span",
    "is_reward_span",
    "operation",
    "reward",
]

F = TypeVar("F", bound=Callable[..., Any])


def _emit(result: Any) -> None:
    """Emit ``result`` as a reward span when it is a number; a warning (and no span) for anything else but None."""
    if isinstance(result, bool) or not isinstance(result, int | float):
        if result is not None:
            warnings.warn(f"Reward is ignored because it is not a number: {result}", stacklevel=3)
        return
    emit_reward(float(result))


def reward(fn: F) -> F:
    """Wrap a reward function (sync or async): each call's returned number is emitted as a reward span of the
    current attempt (``emit_reward``) and returned unchanged. Deprecated in Agent Lightning for ``emit_reward``."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def wrapper_async(*args: Any, **kwargs: Any) -> Any:
            result = await fn(*args, **kwargs)
            _emit(result)
            return result

        return wrapper_async  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        _emit(result)
        return result

    return wrapper  # type: ignore[return-value]
