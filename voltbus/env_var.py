"""Agent Lightning's ``env_var`` module: ``LightningEnvVar`` and ``resolve_{bool,int,str}_env_var``, same semantics
(an override wins, then the variable, then the fallback), read through ``services.settings`` (the one reader of
the environment). voltbus itself reads none of these variables: its settings are ``VOLTBUS_*``."""

from __future__ import annotations

from enum import Enum

from voltbus.services.settings import AgentLightningEnvironment

__all__ = ["LightningEnvVar", "resolve_bool_env_var", "resolve_int_env_var", "resolve_str_env_var"]

_TRUTHY_VALUES = {"1", "true", "yes", "on"}
_FALSY_VALUES = {"0", "false", "no", "off"}


class LightningEnvVar(Enum):
    """Agent Lightning's environment variables (accepted and readable; no voltbus service acts on them)."""

    AGL_EMITTER_DEBUG = "AGL_EMITTER_DEBUG"
    AGL_MANAGED_STORE = "AGL_MANAGED_STORE"
    AGL_CURRENT_ROLE = "AGL_CURRENT_ROLE"
    AGL_SERVER_HOST = "AGL_SERVER_HOST"
    AGL_SERVER_PORT = "AGL_SERVER_PORT"


def _raw(env_var: LightningEnvVar) -> str | None:
    """The variable's text now, or None when unset."""
    return getattr(AgentLightningEnvironment(), env_var.value.removeprefix("AGL_").lower())


def resolve_bool_env_var(
    env_var: LightningEnvVar, override: bool | None = None, fallback: bool | None = None
) -> bool | None:
    """``override`` if given, else the variable as a boolean (1/true/yes/on, 0/false/no/off), else ``fallback``."""
    if override is not None:
        return override
    value = _raw(env_var)
    if value is None:
        return fallback
    normalized = value.strip().lower()
    if normalized in _TRUTHY_VALUES:
        return True
    if normalized in _FALSY_VALUES:
        return False
    raise ValueError(f"{env_var.value} must be one of {_TRUTHY_VALUES} or {_FALSY_VALUES}")


def resolve_int_env_var(
    env_var: LightningEnvVar, override: int | None = None, fallback: int | None = None
) -> int | None:
    """``override`` if given, else the variable as an integer, else ``fallback``."""
    if override is not None:
        return override
    value = _raw(env_var)
    if value is None:
        return fallback
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{env_var.value} must be an integer") from None


def resolve_str_env_var(
    env_var: LightningEnvVar, override: str | None = None, fallback: str | None = None
) -> str | None:
    """``override`` if given, else the variable's text, else ``fallback``."""
    if override is not None:
        return override
    value = _raw(env_var)
    return fallback if value is None else value
