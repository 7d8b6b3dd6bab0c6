"""Memory sizes as the settings take them (DuckDB's memory limit), checked when the settings load."""

from __future__ import annotations

import re

MIN_MEMORY = 64 << 20
"""Smallest ``duckdb_memory_limit`` as a size: below it DuckDB cannot open a projection."""
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(b|bytes|kb|mb|gb|tb|kib|mib|gib|tib|k|m|g|t)\s*", re.IGNORECASE)
_PERCENT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*%\s*")
_UNITS = {"b": 1, "bytes": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}


def size(value: str, what: str) -> str:
    """``value`` when it is a size with a unit as DuckDB takes it, else a ``ValueError`` naming ``what``.

    >>> size("256MiB", "checkpoint threshold")
    '256MiB'
    >>> size("256", "checkpoint threshold")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: checkpoint threshold '256': expected a size with a unit (256MiB, 1GB)
    """
    if _SIZE.fullmatch(value) is None:
        raise ValueError(f"{what} {value!r}: expected a size with a unit (256MiB, 1GB)")
    return value


def memory_limit(value: str) -> str:
    """``value`` when it is a DuckDB memory limit the projector can work with, else a ``ValueError`` that says why.

    >>> memory_limit("512MiB"), memory_limit("25%"), memory_limit("2 GB")
    ('512MiB', '25%', '2 GB')
    >>> memory_limit("1000")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: memory limit '1000': expected a size with a unit (512MiB, 2GB) or a percentage ...
    """
    if (percent := _PERCENT.fullmatch(value)) is not None:
        if not 0 < float(percent[1]) <= 100:
            raise ValueError(f"memory limit {value!r}: a percentage must be above 0 and at most 100")
        return value
    if (size := _SIZE.fullmatch(value)) is None:
        raise ValueError(
            f"memory limit {value!r}: expected a size with a unit (512MiB, 2GB) or a percentage of the machine's "
            "memory (25%)"
        )
    unit = size[2].lower()
    scale = 1024 ** "bkmgt".index(unit[0]) if unit.endswith("ib") else _UNITS[unit[0] if unit != "bytes" else "b"]
    if float(size[1]) * scale < MIN_MEMORY:
        raise ValueError(f"memory limit {value!r}: below {MIN_MEMORY >> 20} MiB DuckDB cannot work on a projection")
    return value
