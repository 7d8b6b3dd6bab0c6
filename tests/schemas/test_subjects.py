"""Every event maps to a subject its stream captures, and rollout events to their aggregate."""

from __future__ import annotations

import pytest

from voltbus.schemas import RolloutEvent, Topology, aggregate_of, stream_of, subject_for

from .samples import SAMPLES

TOPOLOGY = Topology(namespace="vbtest")


def matches(subject: str, pattern: str) -> bool:
    """NATS subject matching with ``*`` wildcards (no ``>`` needed here)."""
    parts, wanted = subject.split("."), pattern.split(".")
    return len(parts) == len(wanted) and all(w in ("*", p) for p, w in zip(parts, wanted, strict=True))


@pytest.mark.parametrize("tag", sorted(SAMPLES))
def test_subject_is_captured_by_its_stream(tag: str) -> None:
    event = SAMPLES[tag]
    subject = subject_for(TOPOLOGY, event)
    patterns = TOPOLOGY.spans_subjects if stream_of(event) == "spans" else TOPOLOGY.control_subjects
    assert any(matches(subject, p) for p in patterns), subject


@pytest.mark.parametrize("tag", sorted(SAMPLES))
def test_aggregate_is_the_rollout_of_rollout_events(tag: str) -> None:
    event = SAMPLES[tag]
    if isinstance(event, RolloutEvent):
        assert aggregate_of(event) == event.rollout_id
        assert matches(subject_for(TOPOLOGY, event), TOPOLOGY.rollout_any(event.rollout_id))
    else:
        assert aggregate_of(event) is None


def test_only_queued_and_requeued_are_dispatchable() -> None:
    dispatchable = {tag for tag, e in SAMPLES.items() if matches(subject_for(TOPOLOGY, e), TOPOLOGY.dispatchable)}
    assert dispatchable == {"RolloutQueued", "RolloutRequeued"}


def test_subject_for_rejects_non_events() -> None:
    with pytest.raises(TypeError):
        subject_for(TOPOLOGY, "RolloutQueued")  # type: ignore[arg-type]
