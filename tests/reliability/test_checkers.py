"""The checkers themselves catch what they claim to: an operation reported failed whose events are stored
anyway, and an acknowledged span missing or stored twice (histories built by the real decider)."""

from __future__ import annotations

from collections import Counter

from voltbus.schemas.commands import ClaimRollout
from voltbus.services.eventlog import Envelope
from voltbus.services.lifecycle import decider

from . import checkers
from .client import queue_command


def stored(*events: object) -> list[Envelope]:
    return [Envelope(seq=i + 1, subject="rel.ro.x.e", time=0.0, event=e) for i, e in enumerate(events)]  # type: ignore[arg-type]


def test_an_operation_reported_failed_but_stored_is_a_violation() -> None:
    queue = queue_command("chk", 1)
    [queued] = decider.decide(queue, decider.initial_state())
    claim = ClaimRollout(rollout_id=queue.rollout_id, attempt_id="a1", dispatch_event_id=queued.event_id,
                         worker_id="w", at=2.0)  # fmt: skip
    claimed = decider.decide(claim, decider.evolve(decider.initial_state(), queued))
    op = {"process": "w0", "op": "ClaimRollout", "outcome": "fail", "args": {"command": checkers.encode_command(claim)}}
    assert checkers.failed_but_stored([op], stored(queued)) == []  # refused and absent: fine
    [violation] = checkers.failed_but_stored([op], stored(queued, *claimed))  # refused, yet its claim is stored
    assert "failed, yet stored" in violation and claimed[0].event_id in violation
    named = {"process": "p", "op": "append", "outcome": "fail", "args": {"event_ids": [queued.event_id]}}
    assert checkers.failed_but_stored([named], stored(queued))  # by the ids the operation names too
    assert checkers.failed_but_stored([{**named, "outcome": "unknown"}], stored(queued)) == []  # unknown may be


def test_acknowledged_ids_are_held_exactly_once() -> None:
    held = Counter({"a": 1, "b": 2})
    assert checkers.once_each({"a"}, held) == []
    assert checkers.once_each({"a", "b", "c"}, held) == ["b held 2 times in the log", "c held 0 times in the log"]
