"""The voltbus error tree: pure exception classes, no I/O.

VoltbusError
 ├── InvalidCommand          a command refused by a decider or a validator
 │    ├── UnknownRollout     the rollout id names nothing in the log
 │    ├── IllegalTransition  the command is not allowed in the current state
 │    ├── AttemptLimit       max_attempts is spent
 │    ├── InvalidId          an id that cannot be used in a subject
 │    └── QueryRefused       SQL that may not run, or ran past a limit, on a projection
 ├── ConcurrencyConflict     an optimistic append lost to another writer
 ├── DecodeError             bytes that are not a known event
 ├── PayloadTooLarge         an event larger than the bus accepts
 ├── PublishFailed           the bus did not acknowledge an event after retries
 │    └── PermissionDenied   the bus refused this user the subject (its role's permissions); not retried
 ├── StreamConfigMismatch    a stream exists with settings that break our guarantees
 ├── BusUnavailable          no NATS server answered at the URL
 ├── BusStartFailed          the embedded nats-server could not start
 └── UpstreamError           an inference engine or other upstream failed
"""

from __future__ import annotations


class VoltbusError(Exception):
    """Root of every error voltbus raises on purpose."""


class InvalidCommand(VoltbusError):
    """A command that cannot be applied; nothing was appended."""


class UnknownRollout(InvalidCommand):
    """The rollout id is not in the log."""

    def __init__(self, rollout_id: str) -> None:
        self.rollout_id = rollout_id
        super().__init__(f"unknown rollout {rollout_id!r}")


class UnknownAttempt(InvalidCommand):
    """The attempt id is not an attempt of the rollout."""

    def __init__(self, rollout_id: str, attempt_id: str) -> None:
        self.rollout_id = rollout_id
        self.attempt_id = attempt_id
        super().__init__(f"unknown attempt {attempt_id!r} of rollout {rollout_id!r}")


class IllegalTransition(InvalidCommand):
    """The command is not allowed in the aggregate's current state."""

    def __init__(self, aggregate_id: str, state: str, command: str) -> None:
        self.aggregate_id = aggregate_id
        self.state = state
        self.command = command
        super().__init__(f"{command} is not allowed on {aggregate_id!r} in state {state!r}")


class AttemptLimit(InvalidCommand):
    """The rollout has used all of its attempts."""

    def __init__(self, rollout_id: str, max_attempts: int) -> None:
        self.rollout_id = rollout_id
        self.max_attempts = max_attempts
        super().__init__(f"rollout {rollout_id!r} has used all {max_attempts} attempts")


class InvalidId(InvalidCommand):
    """An id with characters that cannot appear in a NATS subject token."""

    def __init__(self, kind: str, value: str) -> None:
        self.kind = kind
        self.value = value
        super().__init__(
            f"invalid {kind} {value!r}: use 1-128 characters from A-Z a-z 0-9 _ - (no dots, spaces or wildcards)"
        )


class QueryRefused(InvalidCommand):
    """A query a projection's SQL does not run (not read-only), or stopped at a limit; ``code`` says which."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


class ConcurrencyConflict(VoltbusError):
    """Another writer appended to the aggregate first."""

    def __init__(self, subject: str, expected_seq: int, actual_seq: int | None) -> None:
        self.subject = subject
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq
        super().__init__(f"conflict on {subject}: expected last sequence {expected_seq}, found {actual_seq}")


class DecodeError(VoltbusError):
    """Bytes that do not decode to a known event."""

    def __init__(self, reason: str, seq: int | None = None, subject: str | None = None) -> None:
        self.reason = reason
        self.seq = seq
        self.subject = subject
        where = f" at sequence {seq}" if seq is not None else ""
        on = f" on {subject}" if subject else ""
        super().__init__(f"undecodable event{where}{on}: {reason}")


class PayloadTooLarge(VoltbusError):
    """An encoded event is larger than the bus accepts."""

    def __init__(self, event_id: str, size: int, limit: int) -> None:
        self.event_id = event_id
        self.size = size
        self.limit = limit
        super().__init__(f"event {event_id!r} is {size} bytes, over the {limit}-byte limit")


class PublishFailed(VoltbusError):
    """The bus did not acknowledge events after every retry; they were not stored."""

    def __init__(self, event_ids: list[str], reason: str) -> None:
        self.event_ids = event_ids
        self.reason = reason
        shown = ", ".join(event_ids[:5]) + (" ..." if len(event_ids) > 5 else "")
        super().__init__(f"{len(event_ids)} event(s) not acknowledged ({reason}): {shown}")


class PermissionDenied(PublishFailed):
    """The bus refused this connection's user a publish to the subject: nothing was stored, and no retry can help."""

    def __init__(self, user: str | None, subject: str, event_ids: list[str]) -> None:
        self.user = user
        self.subject = subject
        self.event_ids = event_ids
        self.reason = f"Permissions Violation for Publish to {subject!r}"
        who = f"bus user {user!r}" if user else "a bus connection without a user"
        shown = ", ".join(event_ids[:5]) + (" ..." if len(event_ids) > 5 else "")
        VoltbusError.__init__(
            self,
            f"{who} may not publish to {subject} (Permissions Violation: the role's permissions, docs/security.md); "
            f"{len(event_ids)} event(s) not stored: {shown}",
        )


class StreamConfigMismatch(VoltbusError):
    """A stream exists with a setting that conflicts with what voltbus needs."""

    def __init__(self, stream: str, setting: str, found: object, wanted: object) -> None:
        self.stream = stream
        self.setting = setting
        self.found = found
        self.wanted = wanted
        super().__init__(
            f"stream {stream} exists with {setting}={found!r}, voltbus needs {setting}={wanted!r}; "
            f"fix the stream or point voltbus at another namespace"
        )


class BusUnavailable(VoltbusError):
    """No NATS server answered at the configured URL."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"cannot reach NATS at {url}: {reason} (start one with `voltbus nats`)")


class BusAuthRefused(BusUnavailable):
    """The NATS server refused the connection's credentials (wrong or missing user and password)."""

    def __init__(self, url: str, user: str | None, reason: str) -> None:
        who = f"user {user!r}" if user else "a connection without credentials"
        VoltbusError.__init__(
            self,
            f"NATS at {url} refused {who}: {reason} (set VOLTBUS_NATS__USER and VOLTBUS_NATS__PASSWORD "
            f"from a role's env file of `voltbus nats auth init`)",
        )
        self.url, self.user, self.reason = url, user, reason


class BusStartFailed(VoltbusError):
    """The embedded nats-server could not start; the message says why in one line."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class UpstreamError(VoltbusError):
    """An upstream service (inference engine) failed."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"upstream {url} failed: {reason}")
