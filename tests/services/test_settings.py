"""``VOLTBUS_CREDENTIALS_FILE``: a role's env file read by the settings loader when a process starts
(compose's ``credentials`` job writes it after compose created the containers)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.test_up import VOLTBUS
from voltbus.services.settings import CredentialsNotFound, Settings


def test_the_credentials_file_wins_over_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    creds = tmp_path / "runner.env"
    creds.write_text("# a comment\nVOLTBUS_NATS__USER=runner\nVOLTBUS_NATS__PASSWORD=pw\nOTHER=x\n"
                     "VOLTBUS_GATEWAY__KEY_SECRET=s3cret\nVOLTBUS_PROJECTOR__TOKEN=tok\n")  # fmt: skip
    monkeypatch.setenv("VOLTBUS_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("VOLTBUS_NATS__USER", "admin")  # e.g. an operator's shell that loaded admin.env
    monkeypatch.setenv("VOLTBUS_NATS__URL", "nats://bus:4222")
    settings = Settings()
    assert (settings.nats.user, settings.nats.password, settings.nats.url) == ("runner", "pw", "nats://bus:4222")
    assert (settings.gateway.key_secret, settings.projector.token) == ("s3cret", "tok")
    assert settings.credentials_file == creds


def test_a_missing_credentials_file_is_an_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOLTBUS_CREDENTIALS_FILE", str(tmp_path / "gateway.env"))
    with pytest.raises(CredentialsNotFound, match=r"no readable credentials file at .*/gateway.env"):
        Settings()  # never a gateway that silently runs without its keys
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLTBUS_")}
    env["VOLTBUS_CREDENTIALS_FILE"] = str(tmp_path / "gateway.env")
    out = subprocess.run(VOLTBUS + ["streams"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "voltbus: error: no readable credentials file at" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
