"""Agent Lightning's ``agentlightning.algorithm.verl`` module path: ``VERL``, re-exported from ``voltbus.trainer``."""

from __future__ import annotations

from voltbus.trainer.verl import VERL

__all__ = ["VERL"]
