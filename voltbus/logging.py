"""Agent Lightning's ``logging`` module: ``setup_logging`` (its ``setup``), ``setup_module_logging`` and the deprecated
``configure_logger``, for the ``voltbus`` logger hierarchy (where Agent Lightning configures ``agentlightning``).
voltbus's own processes configure logging with ``services/log.py``; this is for scripts that import voltbus."""

from __future__ import annotations

import logging
import os
import warnings
from logging.config import dictConfig
from typing import Any

__all__ = ["configure_logger", "setup", "setup_logging", "setup_module", "setup_module_logging"]

BASE = "voltbus"
"""The logger ``setup_logging`` configures: every voltbus module logs under it."""
DEFAULT_FORMAT = "%(asctime)s [%(levelname)s] (Process-%(process)d %(name)s)   %(message)s"
DATE_FORMAT = "%H:%M:%S"


def _level(level: int | str) -> int:
    """A level number from a number or a name; ValueError for an unknown name."""
    if isinstance(level, int):
        return level
    value = logging.getLevelName(str(level).upper())
    if not isinstance(value, int):
        raise ValueError(f"Invalid log level: {level}")
    return value


def _console(level: int, color: bool | dict[str, Any]) -> dict[str, Any]:
    """The console handler's dictConfig entry: rich's handler when asked for colour and rich is installed (it is
    not a voltbus dependency), else a plain stream handler."""
    if color is not False:
        try:
            import rich.logging  # noqa: F401
        except ImportError:
            pass
        else:
            return {"class": "rich.logging.RichHandler", "level": level, **(color if isinstance(color, dict) else {})}
    return {"class": "logging.StreamHandler", "level": level, "formatter": "plain"}


def setup_module(
    level: int | str = "INFO",
    *,
    name: str = BASE,
    console: bool = True,
    color: bool | dict[str, Any] = True,
    propagate: bool = False,
    disable_existing_loggers: bool = False,
) -> logging.Logger:
    """Configure one logger (default ``voltbus``): level, a console handler (replacing its handlers), propagation."""
    value = _level(level)
    config: dict[str, Any] = {
        "version": 1,
        "disable_existing_loggers": disable_existing_loggers,
        "formatters": {"plain": {"format": DEFAULT_FORMAT, "datefmt": DATE_FORMAT}},
        "handlers": {"console": _console(value, color)} if console else {},
        "loggers": {name: {"handlers": ["console"] if console else [], "level": value, "propagate": propagate}},
    }
    dictConfig(config)
    return logging.getLogger(name)


def setup(
    level: int | str = "INFO",
    *,
    console: bool = True,
    color: bool | dict[str, Any] = True,
    propagate: bool = False,
    disable_existing_loggers: bool = False,
    capture_warnings: bool = False,
    submodule_levels: dict[str, int | str] | None = None,
    extra_handlers: list[logging.Handler] | None = None,
    formatter: logging.Formatter | None = None,
    apply_to: list[str] | None = None,
    files: str | dict[str, str] | None = None,
) -> None:
    """Agent Lightning's ``setup_logging``, same arguments and meaning, for the ``voltbus`` logger."""
    base = setup_module(
        level, console=console, color=color, propagate=propagate, disable_existing_loggers=disable_existing_loggers
    )
    if formatter is not None:
        for handler in base.handlers:
            if handler.formatter is None:
                handler.setFormatter(formatter)
    for handler in extra_handlers or []:
        if handler not in base.handlers:
            base.addHandler(handler)
    for name, sub in (submodule_levels or {}).items():
        if _level(sub) < base.level:
            base.warning("Submodule logger '%s' level %s is more verbose than the base logger's", name, sub)
        logging.getLogger(name).setLevel(_level(sub))
    if isinstance(files, str):
        _file_handler(base, files, base.level, formatter)
    for name, filename in (files or {}).items() if isinstance(files, dict) else ():
        target = logging.getLogger(name)
        _file_handler(target, filename, target.getEffectiveLevel(), formatter)
    for name in apply_to or []:
        other = logging.getLogger(name)
        other.handlers.clear()
        for handler in base.handlers:
            other.addHandler(handler)
        other.setLevel(base.level)
        other.propagate = False
    if capture_warnings:
        logging.captureWarnings(True)


def _file_handler(logger: logging.Logger, filename: str, level: int, formatter: logging.Formatter | None) -> None:
    """Attach a file handler for ``filename`` unless the logger has one already."""
    path = os.path.abspath(filename)
    if any(getattr(h, "baseFilename", None) == path for h in logger.handlers):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(level)
    handler.setFormatter(formatter or logging.Formatter(DEFAULT_FORMAT, DATE_FORMAT))
    logger.addHandler(handler)


def configure_logger(level: int = logging.INFO, name: str = BASE) -> logging.Logger:
    """Deprecated in Agent Lightning (use ``setup_logging``): one logger, console handler, no propagation."""
    warnings.warn("This function is deprecated in favor of `setup_logging`.", DeprecationWarning, stacklevel=2)
    return setup_module(level=level, name=name, console=True, color=True, propagate=False)


setup_logging = setup
setup_module_logging = setup_module
