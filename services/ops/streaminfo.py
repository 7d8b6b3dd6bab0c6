"""``voltbus streams``: make sure the streams exist and show their state."""

from __future__ import annotations

from collections.abc import Callable

from voltbus.services.eventlog import EventLog
from voltbus.services.settings import NatsSettings


async def show_streams(settings: NatsSettings, say: Callable[[str], None]) -> None:
    """Print one line per stream: messages, bytes, sequence range, consumers."""
    log = await EventLog.connect(settings, name="voltbus-streams")
    try:
        for name in (log.topology.control_stream, log.topology.spans_stream):
            info = await log.js.stream_info(name)
            st = info.state
            say(
                f"{name}: {st.messages} messages, {st.bytes:,} bytes, seq {st.first_seq}..{st.last_seq}, "
                f"{st.consumer_count} consumers, subjects {', '.join(info.config.subjects or [])}"
            )
    finally:
        await log.close()
