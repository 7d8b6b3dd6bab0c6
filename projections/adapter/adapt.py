"""``adapt``: one attempt's spans, model calls and rewards in, its training rows and summary out.

Pure and deterministic: the same rows in any arrival order give the same output (everything is
ordered by sequence id and stream position, never by clocks or input order).
"""

from __future__ import annotations

from .calls import Call, Found, find
from .inputs import AttemptInput
from .matching import Matched, discounted, match_rewards
from .outputs import AdapterOutput, AttemptSummary, TrajectoryRow, TripletRow
from .settings import ADAPTER_VERSION, AdapterSettings, settings_id
from .stitch import Piece, Scored, cut, stitch
from .tree import Tree, build_tree


def adapt(attempt: AttemptInput, settings: AdapterSettings) -> AdapterOutput:
    """Training rows of one attempt under ``settings``."""
    tree = build_tree(attempt.spans)
    found = find(attempt, tree, settings)
    selected = [c for c in found.calls if c.scope == "selected"]
    eligible = [c for c in selected if not c.sampled.failed]
    matched = match_rewards(eligible, found.rewards, settings.reward_policy)
    scored = _score(eligible, matched, settings.gamma)
    by_id = {s.call.call_id: s for s in scored}
    sid = settings_id(settings)
    triplets = [_triplet(attempt, i, c, by_id.get(c.call_id), settings, sid) for i, c in enumerate(selected)]
    pieces, mismatches = stitch(scored, settings)
    rows = [_trajectory(attempt, i, p, settings, sid) for i, p in enumerate(pieces)]
    summary = _summary(attempt, tree, found, matched, (triplets, rows, mismatches), sid)
    return AdapterOutput(triplets=triplets, trajectories=rows, summary=summary)


def _score(calls: list[Call], matched: Matched, gamma: float) -> list[Scored]:
    rewards = [matched.given.get(i) for i in range(len(calls))]
    returns = discounted([r.value if r else None for r in rewards], gamma)
    names = sorted({name for r in rewards if r for name in r.dimensions})
    per_name = {n: discounted([r.dimensions.get(n) if r else None for r in rewards], gamma) for n in names}
    return [
        Scored(
            call=call,
            reward=rewards[i],
            return_value=returns[i],
            dimensions={n: v for n in names if (v := per_name[n][i]) is not None},
        )
        for i, call in enumerate(calls)
    ]


def _triplet(
    attempt: AttemptInput,
    index: int,
    call: Call,
    scored: Scored | None,
    settings: AdapterSettings,
    sid: str,
) -> TripletRow:
    s = call.sampled
    response, _, logprobs, truncated, overlong = cut(s.prompt_ids, s.response_ids, [], s.logprobs, settings)
    reward = scored.reward if scored else None
    return_value = scored.return_value if scored else None
    return TripletRow(
        rollout_id=attempt.rollout_id,
        attempt_id=attempt.attempt_id,
        call_index=index,
        call_id=call.call_id,
        source=call.source,
        agent_name=call.agent,
        task_id=attempt.task_id,
        mode=attempt.mode,
        resources_id=s.resources_id,
        model=s.model,
        prompt_ids=s.prompt_ids,
        response_ids=response,
        logprobs=logprobs,
        reward=reward.value if reward else None,
        return_value=return_value,
        dimensions=scored.dimensions if scored else {},
        no_token_ids=not (s.prompt_ids and s.response_ids),
        no_logprobs=bool(s.response_ids) and s.logprobs is None,
        call_failed=s.failed,
        truncated=truncated,
        overlong_prompt=overlong,
        reward_missing=return_value is None,
        reward_not_numeric=reward is not None and reward.not_numeric,
        settings_id=sid,
        adapter_version=ADAPTER_VERSION,
    )


def _trajectory(attempt: AttemptInput, index: int, piece: Piece, settings: AdapterSettings, sid: str) -> TrajectoryRow:
    response, mask, logprobs, truncated, overlong = cut(
        piece.prompt, piece.response, piece.mask, piece.logprobs, settings
    )
    versions = [c.call.sampled.resources_id for c in piece.calls]
    distinct = list(dict.fromkeys(v for v in versions if v is not None))
    first = piece.calls[0]
    return TrajectoryRow(
        rollout_id=attempt.rollout_id,
        attempt_id=attempt.attempt_id,
        row_index=index,
        task_id=attempt.task_id,
        mode=attempt.mode,
        call_ids=[c.call.call_id for c in piece.calls],
        call_resources=versions,
        resources_ids=distinct,
        mixed_versions=len(set(versions)) > 1,
        prompt_ids=piece.prompt,
        response_ids=response,
        response_mask=mask,
        logprobs=logprobs,
        reward=first.return_value,
        call_rewards=[c.reward.value if c.reward else None for c in piece.calls],
        dimensions=first.dimensions,
        after_mismatch=piece.after_mismatch,
        no_logprobs=piece.logprobs is None,
        truncated=truncated,
        overlong_prompt=overlong,
        reward_missing=first.return_value is None,
        reward_not_numeric=any(c.reward is not None and c.reward.not_numeric for c in piece.calls),
        settings_id=sid,
        adapter_version=ADAPTER_VERSION,
    )


def _summary(
    attempt: AttemptInput,
    tree: Tree,
    found: Found,
    matched: Matched,
    produced: tuple[list[TripletRow], list[TrajectoryRow], int],
    sid: str,
) -> AttemptSummary:
    triplets, rows, mismatches = produced
    scopes = [c.scope for c in found.calls]
    sources = [c.source for c in found.calls if c.scope == "selected"]
    return AttemptSummary(
        rollout_id=attempt.rollout_id,
        attempt_id=attempt.attempt_id,
        task_id=attempt.task_id,
        mode=attempt.mode,
        spans=len(attempt.spans),
        calls=len(found.calls),
        selected=scopes.count("selected"),
        outside_agent=scopes.count("outside_agent"),
        other_agent=scopes.count("other_agent"),
        in_reward=scopes.count("in_reward"),
        nested=scopes.count("nested"),
        gateway_only=sources.count("gateway"),
        span_only=sources.count("span"),
        paired=sources.count("both"),
        failed=sum(t.call_failed for t in triplets),
        no_token_ids=sum(t.no_token_ids for t in triplets),
        rewards=len(found.rewards),
        rewards_unmatched=matched.unmatched,
        rewards_unused=matched.unused,
        rewards_not_numeric=sum(r.not_numeric for r in found.rewards),
        reward_copies_dropped=found.copies_dropped,
        prefix_mismatches=mismatches,
        triplets=len(triplets),
        trajectories=len(rows),
        duplicate_spans=tree.duplicate_spans,
        orphans=tree.orphans,
        cycles_broken=tree.cycles_broken,
        resources_ids=list(dict.fromkeys(t.resources_id for t in triplets if t.resources_id is not None)),
        settings_id=sid,
        adapter_version=ADAPTER_VERSION,
    )
