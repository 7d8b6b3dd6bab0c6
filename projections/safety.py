"""The DuckDB settings of every connection to a projection: the projector's own, the SQL endpoint's and
``voltbus sql --db``'s."""

from __future__ import annotations

SAFETY: dict[str, str | bool | int] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "lock_configuration": True,
}
"""DuckDB settings of every connection to a projection: SQL reaches no file but the database itself (and its own
WAL and spill files), no network and no extension, and no statement can change these settings (a query sent to the
SQL endpoint included). The projector itself needs none of it: its batches are registered Arrow tables."""
