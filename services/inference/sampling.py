"""Choosing the next token of every row of a batch: greedy, temperature, top-p, per-row seeds.

Logprobs are never taken from here: the engine reports the raw log-softmax of the model's logits
(temperature 1, no top-p), whatever the sampling parameters; this module only picks the token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters of one sequence."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    top_logprobs: int = 0
    """Alternatives reported per position (0: only the sampled token)."""
    ignore_eos: bool = False
    """Keep generating after EOS until ``max_tokens`` (vLLM's ``ignore_eos``)."""


@dataclass
class Picker:
    """Draws tokens for a batch; rows with a seed draw from their own generator (reproducible)."""

    params: Sequence[Sampling]
    shared: torch.Generator
    seeded: dict[int, torch.Generator] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i, p in enumerate(self.params):
            if p.seed is not None and p.temperature > 0:
                self.seeded[i] = torch.Generator(device=self.shared.device).manual_seed(p.seed)
        device = self.shared.device
        self.temperature = torch.tensor([max(p.temperature, 1e-6) for p in self.params], device=device)[:, None]
        self.greedy = torch.tensor([p.temperature == 0 for p in self.params], device=device)
        self.top_p = torch.tensor([p.top_p for p in self.params], device=device)[:, None]
        self.any_top_p = any(p.top_p < 1.0 for p in self.params)
        self.all_greedy = bool(self.greedy.all())

    def pick(self, logits: torch.Tensor) -> torch.Tensor:
        """One token id per row from float32 ``logits`` of shape (rows, vocab)."""
        best = logits.argmax(dim=-1)
        if self.all_greedy:
            return best
        probs = torch.softmax(logits / self.temperature, dim=-1)
        if self.any_top_p:
            probs = nucleus(probs, self.top_p)
        drawn = torch.multinomial(probs, 1, generator=self.shared)[:, 0]
        for i, gen in self.seeded.items():
            drawn[i] = torch.multinomial(probs[i], 1, generator=gen)[0]
        return torch.where(self.greedy, best, drawn)


def nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p`` (per row), renormalised.

    >>> nucleus(torch.tensor([[0.5, 0.3, 0.2]]), torch.tensor([[0.6]])).tolist()
    [[0.625, 0.375, 0.0]]
    """
    ordered, order = probs.sort(dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered
    ordered = ordered.masked_fill(before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, ordered)
    return kept / kept.sum(dim=-1, keepdim=True)
