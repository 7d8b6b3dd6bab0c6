"""voltbus: event-sourced reinforcement learning and prompt optimization for AI agents."""

from __future__ import annotations

__all__: list[str] = []
