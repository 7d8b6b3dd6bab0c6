"""Every credential of a deployment in one auth directory: the bus users (``natsauth``), the gateway's
per-rollout key secret and admin key, the projector's SQL token, the dashboard's token, each written into the env files
of the roles that use it. ``ensure_credentials`` creates what is missing and never changes what exists (a role
added since the directory was made gets its user: ``auth.conf`` is written again with the same passwords).
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from voltbus.schemas.subjects import Topology

from .natsauth import ROLES, AuthError, init_auth, read_env_file, write_private

SECRETS: dict[str, str] = {
    "key_secret": "the gateway key secret (per-rollout agent keys)",
    "admin_key": "the gateway admin key",
    "sql_token": "the projector's SQL token",
    "inference_admin_key": "the inference server's admin key (weight swaps, pause)",
    "dashboard_token": "the dashboard's token",
}
"""Every generated secret and what it is, in a few words."""

PLACES: dict[str, tuple[str, tuple[str, ...]]] = {
    "VOLTBUS_GATEWAY__KEY_SECRET": ("key_secret", ("gateway", "runner")),
    "VOLTBUS_GATEWAY__ADMIN_KEY": ("admin_key", ("gateway", "admin")),
    "VOLTBUS_LEARNER__GATEWAY_ADMIN_KEY": ("admin_key", ("learner", "admin")),
    "VOLTBUS_PROJECTOR__TOKEN": ("sql_token", tuple(ROLES)),
    "VOLTBUS_INFERENCE__ADMIN_KEY": ("inference_admin_key", ("inference", "admin")),
    "VOLTBUS_DASHBOARD__TOKEN": ("dashboard_token", ("dashboard", "admin")),
}
"""Each variable written: the secret it holds and the roles whose env file holds it. The runner derives
each rollout's agent key from the key secret; the learner pauses the gateway with the admin key; every
role may read the (read-only) projection."""

_NAMESPACE = re.compile(r"for namespace '([^']*)'")


def _check_existing(out: Path, topo: Topology) -> list[str]:
    """Refuse a directory made for another namespace; the roles it has no env file for (added since it was made)."""
    found = _NAMESPACE.search((out / "auth.conf").read_text().split("\n", 1)[0])
    if found and found.group(1) != topo.namespace:
        raise AuthError(
            f"{out / 'auth.conf'} holds the users of namespace {found.group(1)!r}, not {topo.namespace!r}: "
            "use another directory, or `voltbus nats auth init --force` to replace every credential"
        )
    return [role for role in ROLES if not (out / f"{role}.env").is_file()]


def _add_roles(out: Path, topo: Topology, missing: list[str], rounds: int) -> None:
    """Give each ``missing`` role a user and an env file; ``auth.conf`` is written again from every other role's
    password, which stays as it is."""
    kept = {r: read_env_file(out / f"{r}.env").get("VOLTBUS_NATS__PASSWORD", "") for r in ROLES if r not in missing}
    if not all(kept.values()):
        lost = [f"{r}.env" for r, pw in kept.items() if not pw]
        raise AuthError(f"{out}: no VOLTBUS_NATS__PASSWORD in {', '.join(lost)}: replace them all with --force")
    init_auth(out, topo, rounds, keep=kept)


def ensure_credentials(out: Path, topo: Topology, rounds: int = 11) -> list[str]:
    """Create in ``out`` what is missing (bus users, then each secret in every role file that needs it),
    keep what exists, leave every file mode 0600; return what was created, in words (empty: nothing)."""
    made = []
    if not (out / "auth.conf").is_file():
        init_auth(out, topo, rounds)
        made.append(f"a bus user per role for namespace {topo.namespace!r}")
    elif missing := _check_existing(out, topo):
        _add_roles(out, topo, missing, rounds)
        made.append(f"a bus user for {', '.join(missing)} (every other password kept)")
    files = {role: read_env_file(out / f"{role}.env") for role in ROLES}
    values = {s: v for var, (s, roles) in reversed(PLACES.items()) for r in reversed(roles) if (v := files[r].get(var))}
    values = {s: values.get(s) or secrets.token_urlsafe(32) for s in SECRETS}  # an existing value wins
    for role in ROLES:
        lines = [f"{var}={values[s]}" for var, (s, roles) in PLACES.items() if role in roles and var not in files[role]]
        path = out / f"{role}.env"
        if lines:
            text = path.read_text()
            write_private(path, text + ("" if text.endswith("\n") or not text else "\n") + "\n".join(lines) + "\n")
    missing = {s for var, (s, roles) in PLACES.items() for r in roles if var not in files[r]}
    made += [SECRETS[s] for s in SECRETS if s in missing]
    for path in [out / "auth.conf", *(out / f"{role}.env" for role in ROLES)]:
        os.chmod(path, 0o600)
    os.chmod(out, 0o700)
    return made


def copy_roles(out: Path, role_dirs: list[str]) -> None:
    """Copy each ``ROLE=DIR``'s env file from ``out`` into DIR (made mode 0700, the file 0600), replacing what is
    there: compose gives each container a volume with its own role's file only, so that a container (and the agent
    code a runner runs) reads no other role's secrets, the admin's least of all."""
    for spec in role_dirs:
        role, sep, where = spec.partition("=")
        if not sep or role not in ROLES or not where:
            raise AuthError(f"--role-dir {spec!r}: give ROLE=DIR with ROLE one of {', '.join(ROLES)}")
        target = Path(where)
        target.mkdir(parents=True, exist_ok=True)
        os.chmod(target, 0o700)
        write_private(target / f"{role}.env", (out / f"{role}.env").read_text())
