"""Agent Lightning 1.0's verl entry (``agentlightning.verl``): ``run_ppo`` on voltbus's learner."""

from __future__ import annotations

from .entrypoint import Plan, plan, run_ppo

__all__ = ["Plan", "plan", "run_ppo"]
