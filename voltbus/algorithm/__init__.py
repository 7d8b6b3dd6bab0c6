"""Agent Lightning's ``agentlightning.algorithm`` module path: the algorithms ``Trainer`` runs (``APO``, ``VERL``,
``Baseline``, voltbus's ``GRPO``) and AL's base classes for one's own (``Algorithm``, ``FastAlgorithm``, ``@algo``),
re-exported from ``voltbus.trainer``."""

from __future__ import annotations

from voltbus.trainer import APO, GRPO, VERL, Algorithm, Baseline, FastAlgorithm, algo

__all__ = ["APO", "Algorithm", "Baseline", "FastAlgorithm", "GRPO", "VERL", "algo"]
