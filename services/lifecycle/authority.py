"""Attempt authority: only the worker that claimed an attempt may start, end or update it, proven by signature;
anyone else ends it only by authority, on a subject runners cannot publish to.

A claim records the claimant's Ed25519 public key (``holder_key``); the attempt's own later events carry the
holder's signature (``holder_sig``) over their canonical bytes. Ends and changes by authority (timeouts,
unresponsive, cancel, rollout updates, an unsigned final failure) of a rollout created under rules 2 are
stored on the rollout's authority subject (``<ns>.ro.<id>.c``), which only the coordinator, the learner and
admin may publish to. Every fold
(writers, coordinator, projector) skips an event that breaks these rules (``refusal``): it is stored but
changes nothing, and the projector quarantines it with the reason. Ed25519 signatures are deterministic,
so a retried command still yields the same events.
"""

from __future__ import annotations

import base64
import binascii
import functools

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from voltbus.schemas.rollouts import (
    AttemptClaimed,
    AttemptFailed,
    AttemptMarkedUnresponsive,
    AttemptStarted,
    AttemptSucceeded,
    AttemptTimedOut,
    AttemptUpdated,
    RolloutCancelled,
    RolloutEvent,
    RolloutFailed,
    RolloutRequeued,
    RolloutUpdated,
)

from .state import ACTIVE_ATTEMPT, RolloutState

HOLDER_EVENTS = (AttemptStarted, AttemptSucceeded, AttemptFailed, AttemptUpdated)
"""Events only an attempt's holder may write."""
HOLDER_ENDS = (AttemptTimedOut, AttemptMarkedUnresponsive, RolloutFailed)
"""Ends by authority that an attempt's holder may also sign (then stored on the rollout's own subject)."""
AUTHORITY_EVENTS = (AttemptTimedOut, AttemptMarkedUnresponsive, RolloutCancelled, RolloutFailed, RolloutUpdated)
"""Events that end or change an attempt or rollout without its holder: stored on the authority subject (rules 2)."""

_canonical = msgspec.json.Encoder(order="sorted")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def signed_bytes(event: RolloutEvent) -> bytes:
    """What a holder signs: the event's fields other than ``holder_sig`` and those at their default, sorted
    by name, so an event decoded by a later version (with more defaulted fields) still verifies.

    >>> import msgspec
    >>> e = AttemptStarted(event_id="e1", rollout_id="r1", attempt_id="a1", at=1.5)
    >>> signed_bytes(e) == signed_bytes(msgspec.structs.replace(e, holder_sig="x"))
    True
    >>> signed_bytes(e)
    b'{"at":1.5,"attempt_id":"a1","event_id":"e1","rollout_id":"r1","type":"AttemptStarted"}'
    """
    fields: dict[str, object] = {"type": type(event).__name__}
    for name, wire, default in _signed_fields(type(event)):
        value = getattr(event, name)
        if value is not msgspec.UNSET and value != default:
            fields[wire] = value
    return _canonical.encode(fields)


@functools.cache
def _signed_fields(cls: type) -> tuple[tuple[str, str, object], ...]:
    """(name, wire name, default) of the fields a signature covers; a field without a default never equals the
    sentinel default, so it is always covered."""
    found = []
    for f in msgspec.structs.fields(cls):
        if f.name == "holder_sig":
            continue
        if f.default is not msgspec.NODEFAULT:
            default = f.default
        elif f.default_factory is not msgspec.NODEFAULT:
            default = f.default_factory()
        else:
            default = _REQUIRED
        found.append((f.name, f.encode_name, default))
    return tuple(found)


_REQUIRED = object()


class Holder:
    """A worker's signing key: a new one per process by default, kept in memory only (``raw``: a key a runner with
    fixed worker ids keeps in its key file, so its next process can settle what this one left)."""

    def __init__(self, raw: bytes | None = None) -> None:
        self._key = Ed25519PrivateKey.from_private_bytes(raw) if raw else Ed25519PrivateKey.generate()
        self.public = _b64(self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
        """The public key claims record (base64url of the 32 raw bytes)."""

    def private_bytes(self) -> bytes:
        """The 32 raw bytes of the private key (for a key file, mode 0600)."""
        return self._key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())

    def sign(self, event: RolloutEvent) -> RolloutEvent:
        """``event`` with this holder's signature (``holder_sig``)."""
        signature = self._key.sign(signed_bytes(event))
        return msgspec.structs.replace(event, holder_sig=_b64(signature))  # type: ignore[call-arg]


def verifies(public_key: str, event: RolloutEvent) -> bool:
    """Whether ``event`` carries a valid signature by ``public_key``."""
    signature = getattr(event, "holder_sig", None)
    return signature is not None and _verified(public_key, signature, signed_bytes(event))


@functools.lru_cache(maxsize=16384)
def _verified(public_key: str, signature: str, data: bytes) -> bool:
    """One check per distinct signed event (a store folds a rollout's history again on each read)."""
    try:
        Ed25519PublicKey.from_public_bytes(_unb64(public_key)).verify(_unb64(signature), data)
    except (InvalidSignature, ValueError, binascii.Error):
        return False
    return True


def refusal(state: RolloutState, event: RolloutEvent, subject: str | None = None) -> str | None:
    """Why a fold must not record ``event`` in ``state`` (None: it may). ``subject``: where it was stored (None:
    not from the log, e.g. a writer's own decision, so the subject rule is not checked)."""
    if isinstance(event, HOLDER_EVENTS):
        return _unsigned(state, event, event.attempt_id)
    if isinstance(event, HOLDER_ENDS) and event.holder_sig is not None:
        return _unsigned(state, event, event.attempt_id or "")
    if isinstance(event, AttemptClaimed) and held_by_other(state, event.holder_key):
        held = state.latest.attempt_id  # type: ignore[union-attr]
        return f"AttemptClaimed {event.attempt_id} would take over attempt {held}, which another worker holds"
    if isinstance(event, RolloutRequeued) and _held_active(state, event.attempt_id):
        return f"RolloutRequeued names attempt {event.attempt_id}, which has not ended"
    if isinstance(event, AUTHORITY_EVENTS) and state.rules >= 2 and subject is not None and not subject.endswith(".c"):
        return f"{type(event).__name__} stored on {subject}: an end by authority belongs on the rollout's .c subject"
    return None


def _unsigned(state: RolloutState, event: RolloutEvent, attempt_id: str) -> str | None:
    """Why a holder's event is not its attempt's holder's (None: it is, or the attempt has no key)."""
    attempt = state.attempt(attempt_id)
    if attempt is None or attempt.holder_key is None or verifies(attempt.holder_key, event):
        return None
    how = "unsigned" if getattr(event, "holder_sig", None) is None else "signed by another key"
    return f"{type(event).__name__} on attempt {attempt_id} is {how}: only the worker that claimed it may"


def _held_active(state: RolloutState, attempt_id: str) -> bool:
    attempt = state.attempt(attempt_id)
    return attempt is not None and attempt.holder_key is not None and attempt.status in ACTIVE_ATTEMPT


def held_by_other(state: RolloutState, key: str | None) -> bool:
    """Whether the rollout's latest attempt is in progress and held by a key other than ``key``."""
    latest = state.latest
    return latest is not None and latest.status in ACTIVE_ATTEMPT and latest.holder_key not in (None, key)
