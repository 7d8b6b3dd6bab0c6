"""Bus authentication: one NATS user per role, each allowed only the subjects its job needs.

``voltbus nats auth init --out DIR`` writes ``DIR/auth.conf`` (an ``authorization`` block that
nats-server includes: bcrypt hashes, never passwords) and one ``DIR/<role>.env`` per role with
``VOLTBUS_NATS__USER`` / ``VOLTBUS_NATS__PASSWORD`` (mode 0600). Permissions name this namespace's
subjects and streams; docs/security.md has the table and what the server cannot enforce.

Every role may read through JetStream's API on the streams it reads, may create (never update,
purge or delete) the voltbus streams so any service can start first, and receives replies only
on its own inbox prefix ``_INBOX_<role>``, so no role can listen to another's replies.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from voltbus.schemas.errors import VoltbusError
from voltbus.schemas.subjects import Topology

ROLES: dict[str, str] = {
    "admin": "everything: stream administration, backup and restore",
    "coordinator": "requeues, expires and parks rollouts; reads dead letters; writes its snapshots",
    "runner": "claims rollouts, writes attempts, spans, rewards, heartbeats, worker status",
    "gateway": "writes model calls, rewards, its own pause/resume events; queues rollouts (POST /api/rollouts)",
    "learner": "enqueues rollouts, publishes resources versions, run events and weights",
    "inference": "reads resources versions and fetches weights (reads only)",
    "projector": "reads the control and spans streams (reads only)",
    "dashboard": "reads the control and spans streams (reads only)",
    "storeserver": "Agent Lightning's store API (`voltbus store-server`): a runner's claims, spans and worker status,"
    " and the learner's enqueue, ends by authority and resources (no runs, weights or gateway events)",
}
"""Every role and, in a few words, what it may do."""

API = "$JS.API"


class AuthError(VoltbusError):
    """The auth directory is missing or does not hold what a role needs."""


@dataclass(frozen=True)
class Permissions:
    """What one user may publish and subscribe to (nats-server ``permissions``)."""

    publish: list[str]
    subscribe: list[str]
    deny_publish: list[str] = field(default_factory=list)


def inbox_prefix(user: str) -> str:
    """The reply-subject prefix of a user: only that user may subscribe to it.

    >>> inbox_prefix("runner")
    '_INBOX_runner'
    """
    return f"_INBOX_{user}"


def weights_stream(topo: Topology) -> str:
    """The object store stream that holds the namespace's weights."""
    return f"OBJ_{topo.namespace}-weights"


def _reads(stream: str) -> list[str]:
    """API subjects that read ``stream``: info, direct and stored gets, ephemeral consumers."""
    return [
        f"{API}.STREAM.INFO.{stream}",
        f"{API}.STREAM.MSG.GET.{stream}",
        f"{API}.DIRECT.GET.{stream}",
        f"{API}.DIRECT.GET.{stream}.>",
        f"{API}.CONSUMER.CREATE.{stream}",
        f"{API}.CONSUMER.CREATE.{stream}.>",
        f"{API}.CONSUMER.INFO.{stream}.>",
        f"$JS.FC.{stream}.>",
    ]


def _pulls(stream: str, consumer: str) -> list[str]:
    """Fetching from and acknowledging a durable pull consumer."""
    return [f"{API}.CONSUMER.MSG.NEXT.{stream}.{consumer}", f"$JS.ACK.{stream}.{consumer}.>"]


def _bootstrap(topo: Topology) -> list[str]:
    """Creating the voltbus streams when absent (an existing stream is never changed by a create)."""
    streams = [topo.control_stream, topo.spans_stream, topo.counters_stream, topo.advisories_stream]
    dispatch = f"{API}.CONSUMER.DURABLE.CREATE.{topo.control_stream}.{topo.dispatch_consumer}"
    creates = [f"{API}.STREAM.{verb}.{s}" for s in streams for verb in ("INFO", "CREATE")]
    return [f"{API}.INFO", f"{API}.STREAM.NAMES", dispatch, *creates]


def _weights(topo: Topology) -> list[str]:
    """Writing the weights object store (create the bucket, put chunks and meta, purge replaced chunks)."""
    obj, bucket = weights_stream(topo), f"{topo.namespace}-weights"
    return [f"{API}.STREAM.CREATE.{obj}", f"{API}.STREAM.PURGE.{obj}", f"$O.{bucket}.>"]


def _snapshots(topo: Topology) -> list[str]:
    """Reading and writing the coordinator's snapshots (create the bucket, put chunks and meta, purge replaced
    chunks): the coordinator's alone."""
    obj = topo.snapshots_stream
    return _reads(obj) + [f"{API}.STREAM.CREATE.{obj}", f"{API}.STREAM.PURGE.{obj}", f"$O.{topo.snapshots_bucket}.>"]


def permissions(role: str, topo: Topology) -> Permissions | None:
    """What ``role`` may do in ``topo``'s namespace (None: everything, for ``admin``)."""
    if role == "admin":
        return None
    if role not in ROLES:
        raise AuthError(f"no role {role!r} (roles: {', '.join(ROLES)})")
    ns, ctrl, spans, seq = topo.namespace, topo.control_stream, topo.spans_stream, topo.counters_stream
    rollouts = [f"{ns}.ro.*.q", f"{ns}.ro.*.e"]
    authority = [f"{ns}.ro.*.c"]  # ends by authority: never a runner's (services/lifecycle/authority.py)
    base = _bootstrap(topo) + _reads(ctrl)
    publish = {
        "coordinator": base + _reads(spans) + _reads(topo.advisories_stream) + rollouts + authority + [f"{ns}.wk.*"]
        + _pulls(topo.advisories_stream, f"{ns}-deadletters")
        + [f"{API}.CONSUMER.DURABLE.CREATE.{topo.advisories_stream}.{ns}-deadletters"] + _snapshots(topo),
        "runner": base + _reads(spans) + _reads(seq) + _pulls(ctrl, topo.dispatch_consumer) + rollouts
        + [f"{ns}.sp.*", f"{ns}.seq.*", f"{ns}.wk.*"],
        "gateway": base + _reads(spans) + _reads(seq) + [f"{ns}.sp.*", f"{ns}.seq.*", f"{ns}.gw.*", f"{ns}.ro.*.q"],
        "learner": base + _reads(spans) + _reads(seq) + _reads(weights_stream(topo)) + _weights(topo) + rollouts
        + authority + [f"{ns}.res.*", f"{ns}.run.*"],
        "inference": base + _reads(weights_stream(topo)),
        "projector": base + _reads(spans),
        "dashboard": base + _reads(spans),
        "storeserver": base + _reads(spans) + _reads(seq) + _pulls(ctrl, topo.dispatch_consumer) + rollouts
        + authority + [f"{ns}.sp.*", f"{ns}.seq.*", f"{ns}.wk.*", f"{ns}.res.*"],
    }[role]  # fmt: skip
    durables = [f"{API}.CONSUMER.DELETE.{ctrl}.{topo.dispatch_consumer}"]
    return Permissions(publish=publish, subscribe=[f"{inbox_prefix(role)}.>"], deny_publish=durables)


def _quoted(items: list[str]) -> str:
    return "[" + ", ".join(f'"{s}"' for s in items) + "]"


def render_user(user: str, password_hash: str, perms: Permissions | None) -> str:
    """One entry of the ``users`` list (``perms`` None: no restriction)."""
    lines = [f'    {{ user: "{user}", password: "{password_hash}"']
    if perms is not None:
        deny = f", deny: {_quoted(perms.deny_publish)}" if perms.deny_publish else ""
        lines.append("      permissions: {")
        lines.append(f"        publish: {{ allow: {_quoted(perms.publish)}{deny} }}")
        lines.append(f"        subscribe: {{ allow: {_quoted(perms.subscribe)} }}")
        lines.append("      }")
    lines.append("    }")
    return "\n".join(lines)


def render_auth(hashes: dict[str, str], topo: Topology) -> str:
    """The ``authorization`` block nats-server includes, for users named by role."""
    users = [render_user(role, h, permissions(role, topo)) for role, h in hashes.items()]
    header = f"# voltbus bus users for namespace {topo.namespace!r}: generated by `voltbus nats auth init`\n"
    return header + "authorization {\n  users: [\n" + "\n".join(users) + "\n  ]\n}\n"


def hash_password(password: str, rounds: int) -> str:
    """A bcrypt hash nats-server accepts (it checks one per connection: ``rounds`` sets that cost)."""
    import bcrypt

    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds)).decode()


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, mode 0600, atomically: a kill mid-write leaves the old file whole."""
    partial = path.with_name(f".{path.name}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(partial, 0o600)
    os.replace(partial, path)


def read_env_file(path: Path) -> dict[str, str]:
    """The ``KEY=VALUE`` lines of an env file (``#`` comments and other lines skipped)."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def init_auth(out: Path, topo: Topology, rounds: int = 11, keep: dict[str, str] | None = None) -> dict[str, str]:
    """Write ``out/auth.conf`` and one ``out/<role>.env`` per role with a fresh password; return them.
    ``keep``: the passwords of roles whose env files stay as they are (only the others are written)."""
    out.mkdir(parents=True, exist_ok=True)
    keep = keep or {}
    passwords = {role: keep.get(role) or secrets.token_urlsafe(24) for role in ROLES}
    hashes = {role: hash_password(pw, rounds) for role, pw in passwords.items()}
    for role, pw in passwords.items():
        if role not in keep:
            write_private(out / f"{role}.env", f"VOLTBUS_NATS__USER={role}\nVOLTBUS_NATS__PASSWORD={pw}\n")
    write_private(out / "auth.conf", render_auth(hashes, topo))
    return passwords


def auth_file(auth_dir: Path) -> Path:
    """The server include of an auth directory, which must exist."""
    path = auth_dir / "auth.conf"
    if not path.is_file():
        raise AuthError(f"no {path}: generate it with `voltbus nats auth init --out {auth_dir}`")
    return path


def read_credentials(auth_dir: Path, role: str) -> dict[str, str]:
    """The ``VOLTBUS_NATS__*`` variables of ``role`` from its env file."""
    path = auth_dir / f"{role}.env"
    try:
        return read_env_file(path)
    except OSError as exc:
        raise AuthError(
            f"no credentials for role {role!r} at {path}: {exc.strerror or exc}; "
            f"`voltbus nats auth init --out {auth_dir} --keep-existing` adds a missing role's file"
        ) from None
