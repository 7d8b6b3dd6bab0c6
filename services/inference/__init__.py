"""The CPU inference server: a torch causal LM behind an OpenAI-compatible API with vLLM's token-id fields."""

from __future__ import annotations

from .app import build_app, run

__all__ = ["build_app", "run"]
