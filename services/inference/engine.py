"""Batched generation with a KV cache: left-padded prompts, one forward per new token for the whole batch.

Every row reports, per token, the raw logprob of the sampled token: ``log_softmax`` of the model's
float32 logits at temperature 1, before temperature or top-p (vLLM's default ``raw_logprobs``). It is
what the learner's ``voltbus.model.sequence_logprobs`` recomputes; left padding does not change it
beyond float noise (positions are counted from each row's first real token; padding is masked).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from .detok import TextTracker
from .sampling import Picker, Sampling


@dataclass
class Piece:
    """What one row produced in one step: a token (with its logprob and alternatives) and/or its end."""

    token_id: int | None = None
    logprob: float = 0.0
    top: list[tuple[int, float]] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None


@dataclass
class Row:
    """One sequence to generate, and its result (filled in by the engine)."""

    prompt_ids: list[int]
    sampling: Sampling
    streamed: bool = False
    cancelled: bool = False
    """Set from outside (the client went away): the row ends at the next step with ``abort``."""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    tracker: TextTracker | None = None


Emit = Callable[[list[tuple[Row, Piece]]], None]
"""Receives each step's pieces (called on the engine's thread)."""


def stop_ids(model: PreTrainedModel, tok: PreTrainedTokenizerBase) -> set[int]:
    """The ids that end a sequence: the tokenizer's EOS and the generation config's (one id or a list)."""
    found = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    config = getattr(model, "generation_config", None)
    more = getattr(config, "eos_token_id", None)
    found |= set(more) if isinstance(more, list | tuple) else ({more} if more is not None else set())
    return found


class Engine:
    """A causal LM and its tokenizer; ``generate`` runs one batch to the end (call it from a worker thread)."""

    def __init__(self, model: PreTrainedModel, tok: PreTrainedTokenizerBase, seed: int | None = None) -> None:
        self.model, self.tok = model, tok
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)
        self.eos = stop_ids(model, tok)
        self.pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        self.last_only = (
            {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
        )
        """The output layer at the last position alone (a prompt's other positions would each pay the whole
        vocabulary's logits at the prefill); {} for a model that cannot."""

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    @torch.inference_mode()
    def generate(self, rows: list[Row], emit: Emit | None = None) -> None:
        """Generate every row until each hits EOS, a stop string, its ``max_tokens`` or is cancelled."""
        for row in rows:
            if row.streamed or row.sampling.stop:
                row.tracker = TextTracker(self.decode, row.sampling.stop)
        picker = Picker([r.sampling for r in rows], self.generator)
        top_k = max(r.sampling.top_logprobs for r in rows)
        ids, mask, positions = self._left_pad(rows)
        cache = DynamicCache()
        live = list(range(len(rows)))
        while live:
            out = self.model(
                input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True,
                **self.last_only,
            )  # fmt: skip
            logits = out.logits[:, -1].float()
            chosen = picker.pick(logits)
            logp = torch.log_softmax(logits, dim=-1)
            pieces = self._step(rows, live, chosen, logp, top_k)
            live = [i for i in live if rows[i].finish_reason is None]
            if emit is not None and pieces:
                emit(pieces)
            ids = chosen.masked_fill(~self._alive(rows, live), self.pad)[:, None]
            mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
            positions = positions[:, -1:] + 1
        for row in rows:
            row.text = row.tracker.text if row.tracker else self.decode(row.token_ids)

    def _alive(self, rows: list[Row], live: list[int]) -> torch.Tensor:
        alive = torch.zeros(len(rows), dtype=torch.bool, device=self.device)
        alive[live] = True
        return alive

    def _left_pad(self, rows: list[Row]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        width = max(len(r.prompt_ids) for r in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, width - len(row.prompt_ids) :] = torch.tensor(row.prompt_ids)
            mask[i, width - len(row.prompt_ids) :] = 1
        positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
        return ids.to(self.device), mask.to(self.device), positions.to(self.device)

    def _step(
        self, rows: list[Row], live: list[int], chosen: torch.Tensor, logp: torch.Tensor, top_k: int
    ) -> list[tuple[Row, Piece]]:
        tokens = chosen.tolist()
        picked = logp.gather(-1, chosen[:, None])[:, 0].tolist()
        tops = [[]] * len(rows)
        if top_k:
            values, indices = logp.topk(top_k, dim=-1)
            tops = [list(zip(i, v, strict=True)) for i, v in zip(indices.tolist(), values.tolist(), strict=True)]
        pieces = []
        for i in live:
            row = rows[i]
            if row.cancelled:
                row.finish_reason = "abort"
                pieces.append((row, Piece(finish_reason="abort")))
                continue
            piece = Piece(token_id=tokens[i], logprob=picked[i], top=tops[i][: row.sampling.top_logprobs])
            self._record(row, piece)
            pieces.append((row, piece))
        return pieces

    def _record(self, row: Row, piece: Piece) -> None:
        assert piece.token_id is not None
        row.token_ids.append(piece.token_id)
        row.logprobs.append(piece.logprob)
        row.top.append(piece.top)
        stopped = False
        if row.tracker is not None:
            piece.text, stopped = row.tracker.add(piece.token_id)
        if stopped or (piece.token_id in self.eos and not row.sampling.ignore_eos):
            row.finish_reason = "stop"
        elif len(row.token_ids) >= row.sampling.max_tokens:
            row.finish_reason = "length"
        if row.finish_reason is not None and row.tracker is not None:
            piece.text += row.tracker.flush()
        piece.finish_reason = row.finish_reason
