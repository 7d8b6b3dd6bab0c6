"""Arrow tables as IPC streams: a reader's batch over its socket, a query's answer over HTTP."""

from __future__ import annotations

import pyarrow as pa


def to_ipc(table: pa.Table) -> memoryview:
    """A table as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    return memoryview(sink.getvalue())


def from_ipc(data: bytes | memoryview) -> pa.Table:
    """The table of an Arrow IPC stream (referencing ``data``, not copying it)."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
