"""The gateway: an OpenAI-compatible proxy that attributes, rewrites and records every model call."""

from __future__ import annotations

from .app import build_app, run

__all__ = ["build_app", "run"]
