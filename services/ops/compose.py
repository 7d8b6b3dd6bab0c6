"""docker-compose.yml read as a local topology: what ``voltbus up`` runs, one spec per service.

The file is interpolated the way compose does it (``${VAR:-default}`` from the environment), then
each service is translated for one machine: service hostnames and ``0.0.0.0`` become ``127.0.0.1``,
a named volume's mount point becomes ``<data dir>/<volume>`` (a bind mount's, its host path),
``env_file`` entries are read (relative to the compose file; ``environment`` wins over them), ``voltbus``
is this Python's CLI, and the health check's URL is what readiness polls. A service another waits for with
``condition: service_completed_successfully`` (the ``credentials`` init) is a one-shot job: ``once``. Ports are
the same inside and outside containers.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from voltbus.schemas.errors import VoltbusError

_VAR = re.compile(r"\$\{(\w+)(?:(:?-)([^}]*))?\}")
_URL = re.compile(r"https?://[^'\"\s]+")
VOLTBUS = [sys.executable, "-c", "from voltbus.cli import main; main()"]
AUTH_MOUNT = "/etc/nats/auth"
"""Where the nats service mounts the ``voltbus nats auth init`` directory (its config includes ``auth/auth.conf``)."""


class ComposeError(VoltbusError):
    """The compose file cannot be read or names something ``voltbus up`` cannot run."""


@dataclass(frozen=True)
class Service:
    """One compose service as local processes."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    replicas: int = 1
    depends_on: list[str] = field(default_factory=list)
    health_url: str | None = None
    host_ports: list[int] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)
    volumes: dict[str, Path] = field(default_factory=dict)
    """Local directory of each named volume, by its mount point in the container."""
    once: bool = False
    """A job that must exit 0 before its dependents start (compose's ``service_completed_successfully``)."""


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable substitution: ``${X}``, ``${X-default}`` (unset) and ``${X:-default}`` (unset or empty).

    >>> interpolate("p=${P:-8765} q=${Q-1} r=${R}", {"P": "", "Q": ""})
    'p=8765 q= r='
    """

    def sub(m: re.Match[str]) -> str:
        name, op, default = m.groups()
        value = env.get(name)
        if op == ":-" and not value or op == "-" and value is None:
            return default
        return value or ""

    return _VAR.sub(sub, text)


def read_compose(path: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """The compose document after interpolation (YAML anchors and merge keys resolved)."""
    try:
        doc = yaml.safe_load(interpolate(path.read_text(), env))
    except (OSError, yaml.YAMLError) as exc:
        raise ComposeError(f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict):
        raise ComposeError(f"{path} has no services")
    return doc


def localize(text: str, names: list[str], volumes: dict[str, Path]) -> str:
    """One value as it must read outside containers.

    >>> localize("nats://nats:4222", ["nats"], {})
    'nats://127.0.0.1:4222'
    >>> localize("/data/x.duckdb", [], {"/data": Path("/tmp/v")})
    '/tmp/v/x.duckdb'
    >>> localize("runner=/data/r", [], {"/data": Path("/tmp/v")})
    'runner=/tmp/v/r'
    """
    if text == "0.0.0.0":
        return "127.0.0.1"
    key, sep, rest = text.partition("=")
    if sep and key.isidentifier() and rest.startswith("/"):  # NAME=/path (an option's value)
        return f"{key}={localize(rest, names, volumes)}"
    for name in names:
        text = text.replace(f"//{name}:", "//127.0.0.1:")
    for target, local in volumes.items():
        if text == target or text.startswith(target + "/"):
            return str(local) + text[len(target) :]
    return text


def _host_port(spec: str) -> int:
    """The host side of ``[ip:]host:container`` (or a bare port)."""
    parts = str(spec).split(":")
    return int(parts[-2] if len(parts) >= 2 else parts[0])


def read_env_file(path: Path, env: Mapping[str, str]) -> dict[str, str]:
    """``KEY=VALUE`` lines of an env file (comments, blank lines and surrounding quotes dropped), interpolated."""
    pairs = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.strip().removeprefix("export ").partition("=")
        if sep and key and not key.startswith("#"):
            value = value.strip()
            quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""
            pairs[key.strip()] = value[1:-1] if quoted else interpolate(value, env)
    return pairs


def env_files(name: str, raw: dict[str, Any], base: Path, env: Mapping[str, str]) -> dict[str, str]:
    """The variables of a service's ``env_file`` entries (a path, a list of paths or of ``{path, required}``)."""
    entries = raw.get("env_file") or []
    merged: dict[str, str] = {}
    for entry in [entries] if isinstance(entries, str) else entries:
        spec = entry if isinstance(entry, dict) else {"path": entry}
        path = base / str(spec["path"])
        if path.is_file():
            merged |= read_env_file(path, env)
        elif spec.get("required", True):
            raise ComposeError(f"service {name}: env_file {path} not found")
    return merged


def _mount(source: str, base: Path, data_dir: Path) -> Path:
    """The local directory of a volume: a bind mount's host path, or a named volume under ``data_dir``."""
    if source.startswith(("/", ".", "~")):
        return (base / Path(source).expanduser()).resolve()
    return data_dir / source


def _service(name: str, raw: dict[str, Any], names: list[str], data_dir: Path, base: Path,
             env: Mapping[str, str], once: bool) -> Service:  # fmt: skip
    volumes = {}
    for v in raw.get("volumes", []):
        source, target = str(v).split(":")[:2]
        volumes[target] = _mount(source, base, data_dir)
    command = [str(a) for a in raw.get("command", [])]
    argv = VOLTBUS + command[1:] if command[:1] == ["voltbus"] else command
    test = " ".join(str(t) for t in (raw.get("healthcheck") or {}).get("test", []))
    url = _URL.search(test)
    deps = raw.get("depends_on", [])
    return Service(
        name=name,
        argv=[localize(a, names, volumes) for a in argv],
        env=env_files(name, raw, base, env)
        | {str(k): localize(str(v), names, volumes) for k, v in (raw.get("environment") or {}).items()},
        replicas=int((raw.get("deploy") or {}).get("replicas", 1)),
        depends_on=list(deps),
        health_url=localize(url.group(0), names, volumes) if url else None,
        host_ports=[_host_port(p) for p in raw.get("ports", [])],
        profiles=list(raw.get("profiles", [])),
        volumes=volumes,
        once=once,
    )


def load_topology(path: Path, env: Mapping[str, str], data_dir: Path) -> dict[str, Service]:
    """Every service of the compose file at ``path``, localized, in the file's order."""
    services, base = read_compose(path, env)["services"], path.resolve().parent
    names, jobs = list(services), completed_dependencies(services)
    return {name: _service(name, raw or {}, names, data_dir, base, env, name in jobs) for name, raw in services.items()}


def completed_dependencies(services: dict[str, Any]) -> set[str]:
    """The services some other service waits for with ``condition: service_completed_successfully``.

    >>> completed_dependencies({"a": {"depends_on": {"init": {"condition": "service_completed_successfully"}}}})
    {'init'}
    """
    found = set()
    for raw in services.values():
        deps = (raw or {}).get("depends_on") or {}
        if isinstance(deps, dict):
            found |= {d for d, c in deps.items() if (c or {}).get("condition") == "service_completed_successfully"}
    return found


def start_order(services: dict[str, Service]) -> list[str]:
    """Services ordered so each comes after what it depends on (among ``services``).

    >>> start_order({"b": Service("b", [], depends_on=["a"]), "a": Service("a", [])})
    ['a', 'b']
    """
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise ComposeError(f"dependency cycle: {' -> '.join(path + (name,))}")
        if name in order or name not in services:
            return
        for dep in services[name].depends_on:
            visit(dep, path + (name,))
        order.append(name)

    for name in services:
        visit(name, ())
    return order
