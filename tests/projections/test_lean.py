"""The projector's lean decoding of the spans stream: same rows as the strict codec, same refusals, and a
batch DuckDB refuses is applied again strictly (the bad event quarantined, nothing else lost)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pyarrow as pa
import pytest

from tests.benchmarks.bench_projector import control_events
from voltbus.projections import lean
from voltbus.projections.rows import ARROW, fold_tables, telemetry_rows
from voltbus.schemas import codec
from voltbus.schemas.errors import DecodeError
from voltbus.schemas.spans import AttemptHeartbeatSent, SpanBatch
from voltbus.services.eventlog import BadEvent, Envelope
from voltbus.services.lifecycle import RolloutState, decider
from voltbus.services.projector.projector import Projector
from voltbus.store import Store

from .conftest import dump, projected
from .workload import telemetry, write

EVENTS = [e for n in range(6) for e in telemetry("ro-1", "at-1", n)]


def call_with(**lists: str) -> bytes:
    """A stored ModelCalled whose number lists are replaced by the given JSON text."""
    data = codec.encode(EVENTS[1])
    for name, text in lists.items():
        old = msgspec.json.encode(getattr(EVENTS[1], name))
        data = data.replace(b'"%s":%s' % (name.encode(), old), b'"%s":%s' % (name.encode(), text.encode()))
    return data


def outcome(decode: object, data: bytes) -> object:
    try:
        return decode(data)  # type: ignore[operator]
    except DecodeError as exc:
        return exc.reason


def envelope(seq: int, data: bytes, decode: object) -> Envelope | BadEvent:
    result = outcome(decode, data)
    if isinstance(result, str):
        return BadEvent(seq=seq, subject="vb.sp.x", data=data, reason=result, time=1.0)
    return Envelope(seq=seq, subject="vb.sp.x", time=1.0, event=result)  # type: ignore[arg-type]


def test_lean_events_give_the_strict_rows() -> None:
    for k, event in enumerate(EVENTS):
        data = codec.encode(event)
        strict = Envelope(seq=k + 1, subject="s", time=1.0, event=codec.decode_spans(data))
        fast = Envelope(seq=k + 1, subject="s", time=1.0, event=lean.decode_spans(data))
        assert telemetry_rows(fast) == telemetry_rows(strict)
    assert lean.is_lean(lean.decode_spans(codec.encode(EVENTS[1])))


def test_a_batch_read_lean_gives_the_strict_rows_and_refusals() -> None:
    batch = SpanBatch(event_id="b", events=EVENTS)  # type: ignore[arg-type]
    data = codec.encode(batch)
    fast = lean.decode_spans(data)
    assert isinstance(fast, lean.LeanSpanBatch) and lean.is_lean(fast) and fast.stored == data
    assert any(lean.is_lean(e) for e in fast.events)
    rows = telemetry_rows(Envelope(seq=9, subject="s", time=1.0, event=fast))
    assert rows == telemetry_rows(Envelope(seq=9, subject="s", time=1.0, event=codec.decode_spans(data)))
    assert len(rows) == len([e for e in EVENTS if not isinstance(e, AttemptHeartbeatSent)]) and {
        r["seq"] for _, r in rows
    } == {9}
    assert lean.strict(fast) == batch
    bad = data.replace(b'"response_ids":[', b'"response_ids":["1",', 1)  # a string among a call's token ids
    assert outcome(lean.decode_spans, bad) == outcome(codec.decode_spans, bad) and isinstance(
        outcome(codec.decode_spans, bad), str
    )


@pytest.mark.parametrize(
    "lists",
    [
        {"prompt_ids": '["1",2]'},
        {"prompt_ids": "[1.5]"},
        {"response_ids": "[true]"},
        {"response_ids": "[null]"},
        {"prompt_ids": "null"},
        {"prompt_ids": "[1,]"},
        {"prompt_ids": "[1e3]"},
        {"logprobs": "[1e400]"},
        {"logprobs": '[-0.5,"x"]'},
        {"logprobs": "[-0.5, -1.5e-05 ]"},
        {"logprobs": "[-0.5,2%s]" % ("0" * 308)},  # 309 digits: DuckDB reads inf
        {"logprobs": "[1%se99]" % ("0" * 250)},
        {"logprobs": "[-1%s.5]" % ("0" * 307)},  # in range: taken strictly
        {"logprobs": "[-0.%s1]" % ("0" * 120)},
        {"logprobs": "[-1e-300]"},  # an exponent of three digits, in range: taken strictly
        {"logprobs": "[-1.5e-005,2E+099]"},  # leading zeros: taken strictly too
    ],
)
def test_lean_refuses_what_the_codec_refuses(lists: dict[str, str]) -> None:
    data = call_with(**lists)
    strict, fast = outcome(codec.decode_spans, data), outcome(lean.decode_spans, data)
    if isinstance(strict, str):
        assert fast == strict
    else:  # the same event, its lists kept as text when they are plainly numbers
        assert (lean.strict(fast) if lean.is_lean(fast) else fast) == strict


def test_logprobs_with_short_exponents_are_read_lean() -> None:
    fast = lean.decode_spans(call_with(logprobs="[-5.3e-7,-1.329,-8.9e-05,-2E+1,-0.018]"))
    assert lean.is_lean(fast) and lean.strict(fast) == codec.decode_spans(fast.stored)  # type: ignore[attr-defined]


@pytest.mark.parametrize("text", ["[[1],2]", "[1,[2,3]]", "[[]]"])
def test_a_batch_duckdb_refuses_is_applied_again_strictly(tmp_path: Path, text: str) -> None:
    stored = [codec.encode(e) for e in EVENTS]
    stored[4] = call_with(prompt_ids=text)  # lean takes it (valid JSON of digits, commas, brackets); DuckDB does not
    assert lean.is_lean(lean.decode_spans(stored[4]))
    tables = []
    for name, decode in (("lean", lean.decode_spans), ("strict", codec.decode_spans)):
        projector = Projector(tmp_path / f"{name}.duckdb")
        try:
            projector.apply("spans", [envelope(k + 1, data, decode) for k, data in enumerate(stored)])
            assert projector.positions["spans"] == len(stored)
            tables.append(dump(projector.con))
        finally:
            projector.close()
    assert tables[0] == tables[1]
    assert [q[:2] for q in tables[0]["quarantine"]] == [("spans", 5)]
    assert len(tables[0]["model_calls"]) == 5 and len(tables[0]["spans"]) == 6


async def test_a_poison_model_call_on_the_bus_is_quarantined(store: Store, tmp_path: Path) -> None:
    await write(store, 4)
    await store.log.js.publish(store.topology.span_shard("ro-1"), call_with(prompt_ids="[[7]]"))
    await store.log.js.publish(store.topology.span_shard("ro-1"), call_with(prompt_ids='["7"]'))
    await store.log.publish_spans(EVENTS[3:6])
    ends, tables = await projected(store, tmp_path / "p.duckdb")
    parked = [q for q in tables["quarantine"] if q[0] == "spans"]
    assert [q[1] for q in parked] == [ends["spans"] - 4, ends["spans"] - 3]
    assert all("prompt_ids" in q[3] for q in parked)
    assert dict((s, q) for s, q, _ in tables["checkpoints"])["spans"] == ends["spans"]
    assert tables["model_calls"][-1][1] == EVENTS[4].event_id


def test_fixed_arrow_schemas_name_every_column_of_their_rows() -> None:
    for k, event in enumerate(EVENTS):
        for decode in (codec.decode_spans, lean.decode_spans):
            rows = telemetry_rows(Envelope(seq=k + 1, subject="s", time=1.0, event=decode(codec.encode(event))))
            if isinstance(event, AttemptHeartbeatSent):
                assert rows == []
                continue
            [(name, values)] = rows
            assert list(values) == ARROW[name].names
            assert pa.Table.from_pylist([values], schema=ARROW[name]).to_pylist() == [values]


def test_fold_tables_hold_the_folded_rollouts_attempts_and_states() -> None:
    state = decider.initial_state()
    for event in control_events("t", 2):  # a queued rollout and its claimed attempt
        state = decider.evolve(state, event)  # type: ignore[arg-type]
    untouched = decider.evolve(decider.initial_state(), control_events("u", 2)[0])  # queued, no attempt yet
    built = dict(fold_tables([(state, 2), (untouched, 7)]))
    assert [n for n in built] == ["rollout_rows", "attempt_rows", "state_rows"]
    for name, table in built.items():
        assert table.schema == ARROW[name]
    rollouts = built["rollout_rows"].to_pylist()
    assert [(r["rollout_id"], r["status"], r["attempt_count"], r["last_seq"]) for r in rollouts] == [
        (state.rollout_id, state.status, 1, 2),
        (untouched.rollout_id, "queuing", 0, 7),
    ]
    assert rollouts[0]["latest_attempt_id"] == state.attempts[0].attempt_id and rollouts[1]["latest_attempt_id"] is None
    assert msgspec.json.decode(rollouts[0]["config"]) == msgspec.to_builtins(state.config)
    assert rollouts[0]["input"] == bytes(state.input).decode()
    (attempt,) = built["attempt_rows"].to_pylist()
    claimed = state.attempts[0]
    got = [attempt[c] for c in ("rollout_id", "attempt_id", "status", "worker_id", "last_seq")]
    assert got == [state.rollout_id, claimed.attempt_id, claimed.status, claimed.worker_id, 2]
    assert [msgspec.json.decode(r["state"], type=RolloutState) for r in built["state_rows"].to_pylist()] == [
        state,
        untouched,
    ]
    assert fold_tables([]) == []
