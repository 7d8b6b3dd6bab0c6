"""Issue 24, finding 6: only the worker that claimed an attempt may start, end or update it.

With the runner role, a second runner ended another worker's attempt through ``finish_attempt`` with no
worker id, and a raw ``AttemptSucceeded`` published on the rollout's subject made the projection show the
rollout succeeded. Now a claim records the claimant's Ed25519 key and the attempt's own events must carry
its signature: the store refuses other callers, and every fold (stores, coordinator, projector) ignores an
event without it, which the projector quarantines with the reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import duckdb
import msgspec
import pytest

from voltbus.schemas import codec
from voltbus.schemas.commands import ClaimRollout, ExpireAttempt, FinishAttempt, QueueRollout
from voltbus.schemas.errors import IllegalTransition
from voltbus.schemas.rollouts import AttemptClaimed, AttemptSucceeded, AttemptTimedOut, AttemptUpdated, RolloutCancelled
from voltbus.schemas.subjects import Topology, subject_for
from voltbus.services.eventlog import EventLog
from voltbus.services.lifecycle import decider
from voltbus.services.lifecycle.authority import Holder, refusal, verifies
from voltbus.services.lifecycle.signing import SigningDecider
from voltbus.services.lifecycle.state import RolloutState
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.projector.follow import ends_at, project
from voltbus.services.projector.projector import Projector
from voltbus.store import Store, connect

from .test_bus_permissions import admin_log, auth_dir, role_settings, secured_server  # noqa: F401

R, A = "ro-auth", "at-1"


def claimed(holder: Holder) -> RolloutState:
    """A rollout whose attempt ``A`` ``holder`` claimed, folded through the real decider."""
    state = decider.initial_state()
    for event in decider.decide(QueueRollout(rollout_id=R, input=msgspec.Raw(b"{}"), at=1.0), state):
        state = decider.evolve(state, event)
    claim = ClaimRollout(rollout_id=R, attempt_id=A, dispatch_event_id=state.dispatch_event_id or "", at=2.0)
    for event in SigningDecider(holder).decide(claim, state):
        state = decider.evolve(state, event)
    return state


def succeeded(**signed: str) -> AttemptSucceeded:
    return AttemptSucceeded(event_id="forged", rollout_id=R, attempt_id=A, at=3.0, **signed)


def test_the_holder_ends_its_attempt_with_a_signed_event() -> None:
    holder = Holder()
    state = claimed(holder)
    assert state.latest is not None and state.latest.holder_key == holder.public
    [ended] = SigningDecider(holder).decide(FinishAttempt(rollout_id=R, attempt_id=A, status="succeeded", at=3), state)
    assert isinstance(ended, AttemptSucceeded) and verifies(holder.public, ended)
    assert decider.evolve(state, ended).status == "succeeded"


def test_another_key_or_no_key_is_refused_by_the_decider() -> None:
    state = claimed(Holder())
    finish = FinishAttempt(rollout_id=R, attempt_id=A, status="succeeded", at=3.0)
    with pytest.raises(IllegalTransition, match="held by another worker's key"):
        SigningDecider(Holder()).decide(finish, state)
    with pytest.raises(IllegalTransition, match="held by another worker's key"):
        decider.decide(finish, state)  # no key at all: the SDK called without one, or an old client


def test_unsigned_and_wrongly_signed_events_change_nothing() -> None:
    holder, other = Holder(), Holder()
    state = claimed(holder)
    forged = [succeeded(), other.sign(succeeded()), succeeded(holder_sig=other.sign(succeeded()).holder_sig or "")]
    for event in forged:
        assert decider.evolve(state, event) == state
        assert refusal(state, event) is not None
    tampered = holder.sign(AttemptUpdated(event_id="u", rollout_id=R, attempt_id=A, at=3.0))
    assert decider.evolve(state, msgspec.structs.replace(tampered, metadata={"x": 1})) == state  # fields changed


def test_a_claim_cannot_take_over_a_held_attempt() -> None:
    state, thief = claimed(Holder()), Holder()
    takeover = AttemptClaimed(
        event_id="steal", rollout_id=R, attempt_id="at-2", sequence_id=2, at=3.0, running=True, holder_key=thief.public
    )
    assert decider.evolve(state, takeover) == state
    assert "take over" in (refusal(state, takeover) or "")


def test_an_unkeyed_attempt_is_decided_as_before() -> None:
    """Attempts claimed before keys existed (older logs) have no holder: any writer may end them."""
    state = decider.initial_state()
    for event in decider.decide(QueueRollout(rollout_id=R, input=msgspec.Raw(b"{}"), at=1.0), state):
        state = decider.evolve(state, event)
    claim = ClaimRollout(rollout_id=R, attempt_id=A, dispatch_event_id=state.dispatch_event_id or "", at=2.0)
    for event in decider.decide(claim, state):
        state = decider.evolve(state, event)
    assert decider.evolve(state, succeeded()).status == "succeeded"


def test_ends_go_where_their_writer_may_publish() -> None:
    """The holder's failure (signed) stays on the rollout's own subject; ends by authority go to ``.c``."""
    holder, topo = Holder(), Topology(namespace="vb")
    state = claimed(holder)
    failed = FinishAttempt(rollout_id=R, attempt_id=A, status="failed", at=3.0)
    own = SigningDecider(holder).decide(failed, state)
    assert [type(e).__name__ for e in own] == ["AttemptFailed", "RolloutFailed"]
    assert all(verifies(holder.public, e) for e in own)
    assert {subject_for(topo, e) for e in own} == {topo.rollout_events(R)}
    expired = decider.decide(ExpireAttempt(rollout_id=R, attempt_id=A, status="timeout", at=4.0), state)
    assert [subject_for(topo, e) for e in expired] == [topo.rollout_authority(R)] * 2
    final = decider.evolve(decider.evolve(state, expired[0]), expired[1])
    assert final.status == "failed"


@pytest.fixture
async def runners(secured_server: NatsServer, auth_dir: Path) -> AsyncIterator[tuple[Store, Store]]:  # noqa: F811
    """Two runner processes' stores, each with the runner role's credentials."""
    first = await connect(settings=role_settings(secured_server, auth_dir, "runner"), name="runner-1")
    second = await connect(settings=role_settings(secured_server, auth_dir, "runner"), name="runner-2")
    yield first, second
    await first.close()
    await second.close()


async def projection(log: EventLog, path: Path, rid: str) -> tuple[str, list[str]]:
    """The rollout's status and the quarantine's reasons, in a projection rebuilt from the whole log."""
    projector = Projector(path)
    try:
        await project(projector, log, ends=await ends_at(log), batch_size=50)
    finally:
        projector.close()
    with duckdb.connect(str(path), read_only=True) as con:
        [(status,)] = con.execute("SELECT status FROM rollouts WHERE rollout_id = ?", [rid]).fetchall()
        reasons = [r for (r,) in con.execute("SELECT reason FROM quarantine ORDER BY seq").fetchall()]
    return status, reasons


async def test_a_second_runner_cannot_end_or_forge_the_end_of_another_s_attempt(
    runners: tuple[Store, Store],
    admin_log: EventLog,  # noqa: F811
    tmp_path: Path,
) -> None:
    first, second = runners
    queued = await first.enqueue_rollout({"q": 1})
    claimed_rollout = await first.dequeue_rollout(worker_id="w-1")
    assert claimed_rollout is not None and claimed_rollout.rollout_id == queued.rollout_id
    rid, aid = claimed_rollout.rollout_id, claimed_rollout.attempt.attempt_id
    for how in ({}, {"worker_id": "w-1"}):  # no worker id (the finding), or the holder's id claimed falsely
        with pytest.raises(IllegalTransition, match="held by another worker's key"):
            await second.finish_attempt(rid, aid, **how)  # type: ignore[arg-type]
    with pytest.raises(IllegalTransition, match="held by another worker"):
        await second.update_attempt(rid, aid, metadata={"stolen": True})
    _, head = await admin_log.read(rid)
    # the raw path: events appended with the runner role's own credentials, past the decider
    forged = AttemptSucceeded(event_id="forged-1", rollout_id=rid, attempt_id=aid, at=10.0)
    takeover = AttemptClaimed(
        event_id="forged-2", rollout_id=rid, attempt_id="at-stolen", sequence_id=2, at=11.0, running=True,
        holder_key=second.holder.public, worker_id="w-2",
    )  # fmt: skip
    stolen_end = second.holder.sign(
        AttemptSucceeded(event_id="forged-3", rollout_id=rid, attempt_id="at-stolen", at=12)
    )
    wrong_key = second.holder.sign(msgspec.structs.replace(forged, event_id="forged-1b"))
    for event in (forged, wrong_key, takeover, stolen_end):
        await second.log.append([event])
    # ends by authority belong on the rollout's .c subject, which the runner user may not publish to: stored on
    # its own subject instead, they are ignored
    timeout = AttemptTimedOut(event_id="forged-4", rollout_id=rid, attempt_id=aid, at=13.0)
    cancel = RolloutCancelled(event_id="forged-5", rollout_id=rid, reason="forged", at=14.0)
    for event in (timeout, cancel):
        await second.log.js.publish(second.topology.rollout_events(rid), codec.encode(event))
    _, after = await admin_log.read(rid)
    assert after > head  # the bus stored them: the server cannot tell runners apart
    assert (await first.get_rollout_by_id(rid)).status == "preparing"  # type: ignore[union-attr]
    status, reasons = await projection(admin_log, tmp_path / "forged.duckdb", rid)
    assert status == "preparing"  # the end of an attempt that was never recorded changes nothing either
    assert len(reasons) == 5 and all(r.startswith("refused: ") for r in reasons), reasons
    assert "unsigned" in reasons[0] and "another key" in reasons[1] and "take over" in reasons[2]
    assert all("belongs on the rollout's .c subject" in r for r in reasons[3:])
    finished = await first.finish_attempt(rid, aid, worker_id="w-1")  # the holder still ends its own attempt
    assert finished.status == "succeeded"
    status, _ = await projection(admin_log, tmp_path / "after.duckdb", rid)
    assert status == "succeeded"


async def test_the_learner_still_cancels_a_held_rollout(
    runners: tuple[Store, Store],
    secured_server: NatsServer,  # noqa: F811
    auth_dir: Path,  # noqa: F811
) -> None:
    """An end by authority from a role allowed on the .c subject is recorded (the runner's own end then refused)."""
    first, _ = runners
    learner = await connect(settings=role_settings(secured_server, auth_dir, "learner"), name="learner")
    try:
        queued = await learner.enqueue_rollout({"q": 2})
        claimed_rollout = await first.dequeue_rollout(worker_id="w-1")
        assert claimed_rollout is not None and claimed_rollout.rollout_id == queued.rollout_id
        cancelled = await learner.cancel_rollout(queued.rollout_id, reason="enough")
        assert cancelled.status == "cancelled"
        assert (await first.get_rollout_by_id(queued.rollout_id)).status == "cancelled"  # type: ignore[union-attr]
    finally:
        await learner.close()
