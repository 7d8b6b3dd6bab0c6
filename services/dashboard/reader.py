"""The dashboard's only way to the data: the named queries of ``queries.sql`` sent to the projector's ``/sql``.

Answers come back as Arrow IPC streams and leave as plain rows (non-finite floats as None, so they are JSON).
"""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import httpx
import pyarrow as pa

from voltbus.projections.blocks import parse

QUERIES = {b.name: b.sql for b in parse((Path(__file__).parent / "queries.sql").read_text(), "queries.sql")}


class ProjectorDown(Exception):
    """No projector answers at the configured URL."""


class QueryFailed(Exception):
    """The projector answered a query with an error."""


def finite(value: object) -> object:
    """``value`` as JSON can carry it: decimals as floats, NaN and infinities (at any depth of lists) as None.

    >>> finite([1.0, float("nan"), [float("inf")], Decimal("2.50")])
    [1.0, None, [None], 2.5]
    """
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


class Projections:
    """Runs the dashboard's named queries on the projector at ``url``."""

    def __init__(self, url: str, client: httpx.AsyncClient) -> None:
        self.url = url.rstrip("/")
        self.client = client

    async def rows(self, name: str, **params: object) -> list[dict[str, object]]:
        """The rows of query ``name`` with ``params`` bound to its ``$name`` placeholders."""
        try:
            answer = await self.client.post(f"{self.url}/sql", json={"sql": QUERIES[name], "params": params})
        except httpx.HTTPError as exc:
            raise ProjectorDown(f"no projector answers at {self.url} ({type(exc).__name__}: {exc})") from None
        if answer.status_code != 200:
            try:
                error = answer.json().get("error", answer.text)
            except ValueError:
                error = answer.text
            raise QueryFailed(f"{name}: the projector at {self.url} answered {answer.status_code}: {error}")
        table = pa.ipc.open_stream(answer.content).read_all()
        return [{k: finite(v) for k, v in row.items()} for row in table.to_pylist()]
