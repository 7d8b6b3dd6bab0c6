"""Agent Lightning's ``agentlightning.algorithm.apo`` module path: ``APO``, re-exported from ``voltbus.trainer``."""

from __future__ import annotations

from voltbus.trainer.apo import APO

__all__ = ["APO"]
