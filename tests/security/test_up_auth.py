"""``voltbus up`` runs an authenticated bus: its ``credentials`` job generates a user per role on the first
start, each service connects as its own role, and a client without a user is refused (real processes,
real server).

The whole topology's training run with these users is ``tests/test_up.py``'s main-command test.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.test_up import ROOT, VOLTBUS, UpProcess
from voltbus.services.ops.compose import load_topology, read_env_file
from voltbus.services.ops.natsauth import ROLES

COMPOSE = ROOT / "docker-compose.yml"


def streams(port: int, creds: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``voltbus streams`` against the bus ``up`` started, as a user would run it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VOLTBUS_", "VB_"))}
    env |= {"VOLTBUS_NATS__URL": f"nats://127.0.0.1:{port}", "VOLTBUS_NATS__CONNECT_TIMEOUT_S": "3"} | creds
    return subprocess.run(VOLTBUS + ["streams"], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(90)
def test_up_generates_users_and_the_bus_requires_them(tmp_path: Path) -> None:
    ports = {"nats": free_port(), "nats_monitor": free_port(), "projector": free_port()}
    up = UpProcess(tmp_path, "nats,coordinator,projector", **ports)
    auth = tmp_path / "up/auth"
    assert str(auth) in up.wait_for("created a bus user per role for namespace 'vb'")
    up.wait_for("up: 3 services")
    hint = up.wait_for("up: the bus requires a user")
    assert f". {auth / 'admin.env'}" in hint
    assert {p.name for p in auth.iterdir()} == {"auth.conf"} | {f"{role}.env" for role in ROLES}
    assert all(p.stat().st_mode & 0o077 == 0 for p in auth.iterdir())
    conf = (tmp_path / "up/nats-data/nats-server.conf").read_text()
    assert 'include "../auth/auth.conf"' in conf
    refused = streams(ports["nats"], {})
    assert refused.returncode == 1 and "Authorization Violation" in refused.stderr, refused.stderr
    admin = streams(ports["nats"], read_env_file(auth / "admin.env", {}))
    assert admin.returncode == 0 and "VB_CTRL" in admin.stdout, admin.stderr  # the coordinator created it
    up.proc.send_signal(signal.SIGINT)
    code, text = up.finish()
    assert code == 0, text
    [line] = [line for line in text.splitlines() if "up: the bus refused operations" in line]
    assert "authentication error" in line  # the `voltbus streams` without a user


def test_the_credentials_job_generates_once_for_the_compose_namespace(tmp_path: Path) -> None:
    """The ``credentials`` job as ``up`` runs it (its localized command and environment) makes the users of
    the namespace the compose file gives its services, in the directory compose would mount."""

    def job(env: dict[str, str], file: Path = COMPOSE) -> subprocess.CompletedProcess[str]:
        service = load_topology(file, env, tmp_path / "data")["credentials"]
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("VOLTBUS_", "VB_"))}
        argv = service.argv + ["--rounds", "4"]
        out = subprocess.run(argv, env=clean | service.env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out

    first = job({"VB_NAMESPACE": "team1"})
    auth = tmp_path / "data/auth"
    assert "created a bus user per role for namespace 'team1'" in first.stdout
    assert "namespace 'team1'" in (auth / "auth.conf").read_text()
    runner = (auth / "runner.env").read_text()
    again = job({"VB_NAMESPACE": "team1"})
    assert "nothing changed" in again.stdout and (auth / "runner.env").read_text() == runner  # reused
    copy = tmp_path / "project/docker-compose.yml"
    copy.parent.mkdir()
    copy.write_text(COMPOSE.read_text())
    job({"VB_AUTH_DIR": "./mine"}, copy)
    assert "namespace 'vb'" in (copy.parent / "mine/auth.conf").read_text()  # as compose resolves a bind mount
