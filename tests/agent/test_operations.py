"""``operation``: one ``agentlightning.operation`` span per traced call or block, with inputs and output."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from voltbus.schemas.spans import SpanStatus
from voltbus.services.clients.telemetry.operations import OperationContext, operation
from voltbus.services.clients.telemetry.tracing import clear_active_tracer, set_active_tracer

from .conftest import RecordingTracer

IN = "agentlightning.operation.input"
OUT = "agentlightning.operation.output"
NAME = "agentlightning.operation.name"


# As a decorator.


def test_bare_decorator_records_name_inputs_with_defaults_and_output(tracer: RecordingTracer) -> None:
    @operation
    def add(a: int, b: dict[str, Any], c: int = 3) -> dict[str, Any]:
        return {"sum": a + c, "items": [1, 2]}

    assert add(1, {"x": {"y": "z"}}) == {"sum": 4, "items": [1, 2]}
    assert add.__name__ == "add"
    [span] = tracer.spans
    assert span.name == "agentlightning.operation"
    assert span.attributes == {
        NAME: "add",
        f"{IN}.a": 1,
        f"{IN}.b.x.y": "z",
        f"{IN}.c": 3,
        f"{OUT}.sum": 4,
        f"{OUT}.items": [1, 2],
    }


def test_each_call_records_its_own_span(tracer: RecordingTracer) -> None:
    @operation
    def echo(x: int) -> int:
        return x

    echo(1)
    echo(2)
    assert [s.attributes[OUT] for s in tracer.spans] == [1, 2]


def test_decorator_with_attributes_and_name(tracer: RecordingTracer) -> None:
    @operation(name="custom", category="compute", meta={"v": 1})
    def work() -> None:
        return None

    work()
    [span] = tracer.spans
    assert span.attributes == {NAME: "custom", "category": "compute", "meta.v": 1, OUT: "null"}


def test_empty_parentheses_decorate_too(tracer: RecordingTracer) -> None:
    @operation()
    def f() -> int:
        return 1

    assert f() == 1
    assert tracer.spans[0].attributes == {NAME: "f", OUT: 1}


def test_varargs_and_kwargs(tracer: RecordingTracer) -> None:
    @operation
    def f(a: int, *rest: Any, **options: Any) -> str:
        return "ok"

    f(1, {"k": "v"}, 3, flag=True)
    attributes = tracer.spans[0].attributes
    assert attributes[f"{IN}.a"] == 1
    assert attributes[f"{IN}.rest.0.k"] == "v"
    assert attributes[f"{IN}.rest.1"] == 3
    assert attributes[f"{IN}.options.flag"] is True
    assert attributes[OUT] == "ok"


def test_unbindable_call_records_raw_args_and_kwargs(tracer: RecordingTracer) -> None:
    def f(a: int) -> int:
        return a

    traced = operation(f)
    with pytest.raises(TypeError):
        traced(1, 2, z={"deep": 1})
    [span] = tracer.spans
    assert span.status.status_code == "ERROR"
    assert span.attributes[f"{IN}.args.0"] == 1
    assert span.attributes[f"{IN}.args.1"] == 2
    assert span.attributes[f"{IN}.kwargs.z.deep"] == 1


def test_values_flattening_rejects_are_recorded_whole(tracer: RecordingTracer) -> None:
    @operation
    def f(scores: dict[int, float]) -> dict[int, str]:
        return {1: "a"}

    assert f({1: 0.5}) == {1: "a"}
    attributes = tracer.spans[0].attributes
    assert attributes[f"{IN}.scores"] == '{"1": 0.5}'
    assert attributes[OUT] == '{"1": "a"}'


def test_exception_marks_the_span_error_and_propagates(tracer: RecordingTracer) -> None:
    @operation
    def fail(x: int) -> None:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        fail(5)
    [span] = tracer.spans
    assert span.status == SpanStatus(status_code="ERROR", description="bad input")
    assert span.attributes[f"{IN}.x"] == 5
    assert OUT not in span.attributes
    assert span.attributes["exception.type"] == "ValueError"


async def test_async_decorator(tracer: RecordingTracer) -> None:
    @operation(stage="async")
    async def fetch(n: int) -> list[int]:
        await asyncio.sleep(0)  # a coroutine that yields, as real async work does
        return list(range(n))

    assert await fetch(3) == [0, 1, 2]
    [span] = tracer.spans
    assert span.attributes == {NAME: "fetch", "stage": "async", f"{IN}.n": 3, OUT: [0, 1, 2]}


async def test_async_calls_run_concurrently_without_mixing(tracer: RecordingTracer) -> None:
    @operation
    async def square(n: int) -> int:
        await asyncio.sleep(0.01 * (3 - n))  # the calls end in reverse order: their spans must not mix
        return n * n

    assert await asyncio.gather(*(square(n) for n in range(3))) == [0, 1, 4]
    assert sorted((s.attributes[f"{IN}.n"], s.attributes[OUT]) for s in tracer.spans) == [(0, 0), (1, 1), (2, 4)]


async def test_async_exception(tracer: RecordingTracer) -> None:
    @operation
    async def fail() -> None:
        raise KeyError("k")

    with pytest.raises(KeyError):
        await fail()
    assert tracer.spans[0].status.status_code == "ERROR"


def test_tracer_is_resolved_at_decoration_time(no_tracer: None) -> None:
    with pytest.raises(RuntimeError, match=r"^No active tracer found\. Cannot trace operation spans\.$"):

        @operation
        def f() -> None:
            return None

    recording = RecordingTracer()
    set_active_tracer(recording)

    @operation
    def g() -> int:
        return 1

    clear_active_tracer()
    assert g() == 1
    assert len(recording.spans) == 1


def test_propagate_false_exports_nothing(tracer: RecordingTracer) -> None:
    @operation(propagate=False)
    def f() -> int:
        return 1

    assert f() == 1
    with operation(propagate=False) as op:
        op.set_output(2)
    assert op.span().attributes == {OUT: 2}
    assert tracer.spans == []


# As a context manager.


def test_context_manager_records_inputs_and_output(tracer: RecordingTracer) -> None:
    with operation(user_id=123, name="block") as op:
        assert isinstance(op, OperationContext)
        op.set_input("q", {"k": [1, 2]}, data={"rows": 2}, flag=False)
        op.set_output({"answer": 42})
    span = op.span()
    assert tracer.spans == [span]
    assert span.name == "agentlightning.operation"
    assert span.attributes == {
        "user_id": 123,
        NAME: "block",
        f"{IN}.args.0": "q",
        f"{IN}.args.1.k": [1, 2],
        f"{IN}.data.rows": 2,
        f"{IN}.flag": False,
        f"{OUT}.answer": 42,
    }


def test_context_manager_without_name_has_no_operation_name(tracer: RecordingTracer) -> None:
    with operation() as op:
        pass
    assert op.span().attributes == {}
    assert op.span().status.status_code == "OK"


def test_context_manager_error(tracer: RecordingTracer) -> None:
    with pytest.raises(RuntimeError, match="inside"):
        with operation() as op:
            op.set_input(1)
            raise RuntimeError("inside")
    assert op.span().status == SpanStatus(status_code="ERROR", description="inside")
    assert op.span().attributes[f"{IN}.args.0"] == 1


def test_span_start_time_is_when_the_block_began(tracer: RecordingTracer) -> None:
    with operation() as op:
        started = op._recording.start  # type: ignore[union-attr]
    assert op.span().start_time == started


def test_setters_and_span_outside_the_block_raise(tracer: RecordingTracer) -> None:
    op = operation()
    with pytest.raises(RuntimeError, match="Span is not ready yet."):
        op.span()
    with pytest.raises(RuntimeError, match="No recording context found. Cannot set input."):
        op.set_input(1)
    with pytest.raises(RuntimeError, match="No recording context found. Cannot set output."):
        op.set_output(1)
    with op:
        pass
    with pytest.raises(RuntimeError, match="Cannot set output."):
        op.set_output(1)


def test_context_manager_without_tracer_raises(no_tracer: None) -> None:
    with pytest.raises(RuntimeError, match="Cannot trace operation spans"):
        operation()


# Argument validation.


def test_name_conflicts_with_the_operation_name_attribute(tracer: RecordingTracer) -> None:
    with pytest.raises(ValueError, match="Cannot specify both `name` and `additional_attributes.operation_name`."):
        operation(name="a", **{NAME: "b"})
    with operation(**{NAME: "b"}) as op:
        pass
    assert op.span().attributes == {NAME: "b"}


def test_custom_span_names_are_rejected(tracer: RecordingTracer) -> None:
    with pytest.raises(ValueError, match="Custom span names are intentionally not supported"):
        operation("my-span")  # type: ignore[call-overload]
