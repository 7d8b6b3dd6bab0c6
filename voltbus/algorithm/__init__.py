"""Agent Lightning's ``agentlightning.algorithm`` module path: the algorithms ``Trainer`` runs (``APO``, ``VERL``,
``Baseline``, and voltbus's ``GRPO``), re-exported from ``voltbus.trainer``."""

from __future__ import annotations

from voltbus.trainer import APO, GRPO, VERL, Baseline

__all__ = ["APO", "Baseline", "GRPO", "VERL"]
