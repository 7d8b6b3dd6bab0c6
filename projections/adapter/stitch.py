"""Trajectory rows: consecutive calls of an attempt stitched while each prompt extends the context exactly.

The context after a call is its prompt plus its response. The next call joins the row when its prompt
starts with that context; the rest of its prompt (tool output, the next user turn) is appended as
observation tokens (mask 0, logprob 0.0) and its response as sampled tokens (mask 1, its logprobs).
Otherwise the row ends, the call starts a new one, and the mismatch is counted. A call without token
ids ends the row without counting a mismatch (it is counted as ``no_token_ids``); failed calls are
skipped. With ``aggregation="call"`` every call is its own row.
"""

from __future__ import annotations

import msgspec

from .calls import Call
from .rewards import Reward
from .settings import AdapterSettings


class Scored(msgspec.Struct, frozen=True, kw_only=True):
    """A selected call with its matched reward and returns."""

    call: Call
    reward: Reward | None
    """The reward matched to it."""
    return_value: float | None
    """Discounted return at this call."""
    dimensions: dict[str, float]
    """Discounted return of each dimension."""


class Piece(msgspec.Struct, kw_only=True):
    """A row being built."""

    calls: list[Scored]
    prompt: list[int]
    response: list[int]
    mask: list[int]
    logprobs: list[float] | None
    context: list[int]
    after_mismatch: bool


def _start(item: Scored, after_mismatch: bool) -> Piece:
    s = item.call.sampled
    return Piece(
        calls=[item],
        prompt=list(s.prompt_ids),
        response=list(s.response_ids),
        mask=[1] * len(s.response_ids),
        logprobs=list(s.logprobs) if s.logprobs is not None else None,
        context=s.prompt_ids + s.response_ids,
        after_mismatch=after_mismatch,
    )


def _extends(piece: Piece, item: Scored) -> bool:
    prompt = item.call.sampled.prompt_ids
    return len(prompt) >= len(piece.context) and prompt[: len(piece.context)] == piece.context


def _append(piece: Piece, item: Scored) -> None:
    s = item.call.sampled
    observation = s.prompt_ids[len(piece.context) :]
    piece.calls.append(item)
    piece.response += observation + s.response_ids
    piece.mask += [0] * len(observation) + [1] * len(s.response_ids)
    if piece.logprobs is not None and s.logprobs is not None:
        piece.logprobs += [0.0] * len(observation) + s.logprobs
    else:
        piece.logprobs = None
    piece.context = s.prompt_ids + s.response_ids


def stitch(items: list[Scored], settings: AdapterSettings) -> tuple[list[Piece], int]:
    """The attempt's rows and how many prefix mismatches split them."""
    pieces: list[Piece] = []
    current: Piece | None = None
    mismatches = 0
    for item in items:
        s = item.call.sampled
        if s.failed:
            continue
        if not (s.prompt_ids and s.response_ids):
            current = None
            continue
        if current is not None and settings.aggregation == "trajectory" and _extends(current, item):
            _append(current, item)
            continue
        mismatch = current is not None and settings.aggregation == "trajectory"
        mismatches += mismatch
        current = _start(item, mismatch)
        pieces.append(current)
    return pieces, mismatches


def cut(
    prompt: list[int], response: list[int], mask: list[int], logprobs: list[float] | None, settings: AdapterSettings
) -> tuple[list[int], list[int], list[float] | None, bool, bool]:
    """Response, mask and logprobs cut to ``max_response_length``; then (truncated, overlong prompt) flags.

    >>> cut([1, 2, 3], [4, 5, 6], [1, 0, 1], None, AdapterSettings(max_response_length=2, max_prompt_length=2))
    ([4, 5], [1, 0], None, True, True)
    """
    limit = settings.max_response_length
    truncated = limit is not None and len(response) > limit
    if truncated:
        response, mask = response[:limit], mask[:limit]
        logprobs = logprobs[:limit] if logprobs is not None else None
    overlong = settings.max_prompt_length is not None and len(prompt) > settings.max_prompt_length
    return response, mask, logprobs, truncated, overlong
