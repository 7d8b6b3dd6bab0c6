"""The event log: the only code that writes to JetStream (a library, not a service).

Stream setup, exactly-once appends (message-id dedup plus per-rollout optimistic concurrency with
ambiguity resolution), aggregate reads, pipelined span publishing and ordered replay.
"""

from __future__ import annotations

from .connection import connect, unsubscribe
from .feed import Feed
from .log import Decider, EventLog, Transacted
from .records import Appended, BadEvent, Envelope, Passed
from .streams import control_config, ensure_consumer, ensure_streams, group_dispatch_config, spans_config, topology_of

__all__ = [
    "Appended",
    "BadEvent",
    "Decider",
    "Envelope",
    "EventLog",
    "Feed",
    "Passed",
    "Transacted",
    "connect",
    "control_config",
    "ensure_consumer",
    "ensure_streams",
    "group_dispatch_config",
    "spans_config",
    "topology_of",
    "unsubscribe",
]
