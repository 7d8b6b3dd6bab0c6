"""``operation``: trace a function call or a code block as an ``agentlightning.operation`` span.

Same API and attributes as Agent Lightning 0.3's ``emitter/annotation.py:operation`` and ``OperationContext``.
The tracer interface only creates zero-duration spans, so an operation's span is stamped with its start time
and created when the operation ends.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar, cast, overload

from voltbus.schemas.base import Attributes
from voltbus.schemas.spans import SpanStatus
from voltbus.services.clients.telemetry.attributes import (
    flatten_attributes,
    format_exception_attributes,
    sanitize_attributes,
)
from voltbus.services.clients.telemetry.emitters import resolve_tracer
from voltbus.services.clients.telemetry.semconv import AGL_OPERATION, LightningSpanAttributes
from voltbus.services.clients.telemetry.tracing import SpanCore, Tracer

_FnT = TypeVar("_FnT", bound=Callable[..., Any])
_NAME = LightningSpanAttributes.OPERATION_NAME.value
_INPUT = LightningSpanAttributes.OPERATION_INPUT.value
_OUTPUT = LightningSpanAttributes.OPERATION_OUTPUT.value


def _flatten_under(prefix: str, value: Any) -> dict[str, Any]:
    """``value`` flattened under ``prefix``; a value flattening rejects (non-str dict keys) is kept whole.

    >>> _flatten_under("in.x", {"a": [1, 2]}), _flatten_under("in.x", [1, 2]), _flatten_under("in.x", {1: "a"})
    ({'in.x.a': [1, 2]}, {'in.x': [1, 2]}, {'in.x': {1: 'a'}})
    """
    try:
        return flatten_attributes({prefix: value})
    except ValueError:
        # Agent Lightning raises here and the traced function never runs; tracing must not break the call.
        return {prefix: value}


def bound_inputs(signature: inspect.Signature, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments as flattened ``operation.input`` attributes, bound to the signature when possible.

    >>> def f(a, *rest, b=2): ...
    >>> bound_inputs(inspect.signature(f), (1, 5, 6), {})
    {'agentlightning.operation.input.a': 1, 'agentlightning.operation.input.rest.0': 5, \
'agentlightning.operation.input.rest.1': 6, 'agentlightning.operation.input.b': 2}
    >>> bound_inputs(inspect.signature(f), (), {"c": 3})
    {'agentlightning.operation.input.kwargs.c': 3}
    """
    attributes: dict[str, Any] = {}
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        for index, value in enumerate(args):
            attributes.update(_flatten_under(f"{_INPUT}.args.{index}", value))
        if kwargs:
            attributes.update(_flatten_under(f"{_INPUT}.kwargs", dict(kwargs)))
        return attributes
    bound.apply_defaults()
    for name, value in bound.arguments.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_POSITIONAL:
            for index, item in enumerate(value):
                attributes.update(_flatten_under(f"{_INPUT}.{name}.{index}", item))
        else:
            attributes.update(_flatten_under(f"{_INPUT}.{name}", value))
    return attributes


class _Recording:
    """The attributes one running operation has gathered, and when it started."""

    def __init__(self, attributes: Attributes) -> None:
        self.attributes: Attributes = dict(attributes)
        self.start = time.time()

    def record(self, attributes: Mapping[str, Any]) -> None:
        self.attributes.update(sanitize_attributes(attributes))

    def finish(self, tracer: Tracer, name: str, error: BaseException | None) -> SpanCore:
        if error is None:
            return tracer.create_span(name, attributes=self.attributes, timestamp=self.start)
        # The tracer interface has no span events, so the exception event's fields become attributes.
        attributes = {**self.attributes, **format_exception_attributes(error)}
        status = SpanStatus(status_code="ERROR", description=str(error))
        return tracer.create_span(name, attributes=attributes, timestamp=self.start, status=status)


class OperationContext:
    """Traces an operation: as a context manager (``set_input``/``set_output``) or as a decorator (automatic)."""

    def __init__(self, name: str, attributes: Mapping[str, Any], propagate: bool = True) -> None:
        """Resolve the tracer now (at decoration time for ``@operation``)."""
        self.name = name
        self.initial_attributes = flatten_attributes(dict(attributes), expand_leaf_lists=False)
        self.propagate = propagate
        self.tracer = resolve_tracer(propagate, "trace operation spans")
        self._recording: _Recording | None = None
        self._span: SpanCore | None = None

    def __enter__(self) -> OperationContext:
        """Start recording."""
        self._recording = _Recording(sanitize_attributes(self.initial_attributes))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Create the span (ERROR when the block raised); the exception propagates."""
        recording, self._recording = self._recording, None
        if recording is not None:
            self._span = recording.finish(self.tracer, self.name, exc)

    def span(self) -> SpanCore:
        """The span, once the block has exited."""
        if self._span is None:
            raise RuntimeError("Span is not ready yet.")
        return self._span

    def set_input(self, *args: Any, **kwargs: Any) -> None:
        """Record positional inputs as ``input.args.<i>`` and keyword inputs as ``input.<name>``."""
        if self._recording is None:
            raise RuntimeError("No recording context found. Cannot set input.")
        attributes: dict[str, Any] = {}
        for index, value in enumerate(args):
            attributes.update(_flatten_under(f"{_INPUT}.args.{index}", value))
        for key, value in kwargs.items():
            attributes.update(_flatten_under(f"{_INPUT}.{key}", value))
        self._recording.record(attributes)

    def set_output(self, output: Any) -> None:
        """Record the output under ``operation.output``."""
        if self._recording is None:
            raise RuntimeError("No recording context found. Cannot set output.")
        self._recording.record(_flatten_under(_OUTPUT, output))

    def __call__(self, fn: _FnT) -> _FnT:
        """Wrap ``fn`` (sync or async) so that every call records one span with its inputs and output."""
        signature = inspect.signature(fn)
        initial = sanitize_attributes({_NAME: fn.__name__, **self.initial_attributes})
        tracer, name = self.tracer, self.name

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                recording = _Recording(initial)
                try:
                    recording.record(bound_inputs(signature, args, kwargs))
                    result = await fn(*args, **kwargs)
                    recording.record(_flatten_under(_OUTPUT, result))
                except BaseException as exc:
                    recording.finish(tracer, name, exc)
                    raise
                recording.finish(tracer, name, None)
                return result

            return cast(_FnT, async_wrapper)

        @functools.wraps(fn)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            recording = _Recording(initial)
            try:
                recording.record(bound_inputs(signature, args, kwargs))
                result = fn(*args, **kwargs)
                recording.record(_flatten_under(_OUTPUT, result))
            except BaseException as exc:
                recording.finish(tracer, name, exc)
                raise
            recording.finish(tracer, name, None)
            return result

        return cast(_FnT, sync_wrapper)


@overload
def operation(fn: _FnT, *, propagate: bool = True, name: str | None = None, **attributes: Any) -> _FnT: ...


@overload
def operation(
    fn: None = None, *, propagate: bool = True, name: str | None = None, **attributes: Any
) -> OperationContext: ...


def operation(fn: Any = None, *, propagate: bool = True, name: str | None = None, **attributes: Any) -> Any:
    """Trace a function (``@operation``, ``@operation(**attrs)``) or a block (``with operation(**attrs) as op``).

    The span name is always ``agentlightning.operation``; ``name`` sets ``agentlightning.operation.name``.
    """
    if name is not None:
        if _NAME in attributes:
            raise ValueError("Cannot specify both `name` and `additional_attributes.operation_name`.")
        attributes[_NAME] = name
    if callable(fn):
        return OperationContext(AGL_OPERATION, attributes, propagate=propagate)(fn)
    if fn is not None:
        raise ValueError("Custom span names are intentionally not supported when used as a context manager.")
    return OperationContext(AGL_OPERATION, attributes, propagate=propagate)
