"""The dashboard reads the projection, so it takes a token: under compose any container that reached it read the
projection through it. A browser signs in once (``/?token=``, then an HttpOnly, SameSite=Strict cookie); scripts send
a bearer header; ``/health`` needs nothing; with no token it refuses to listen beyond loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from voltbus.schemas.subjects import Topology
from voltbus.services.dashboard import app as dashboard_app
from voltbus.services.httpguard import Exposed
from voltbus.services.ops.credentials import ensure_credentials
from voltbus.services.ops.natsauth import read_env_file
from voltbus.services.serving import free_port, serving
from voltbus.services.settings import DashboardSettings, Settings

TOKEN = "dashboard-t0ken"


def settings(token: str | None = TOKEN, host: str = "127.0.0.1") -> Settings:
    return Settings(dashboard=DashboardSettings(projector_url="http://127.0.0.1:9", token=token, host=host))


@asynccontextmanager
async def dashboard() -> AsyncIterator[httpx.AsyncClient]:
    """The dashboard, token on, and a client with no credentials (it keeps cookies, as a browser does)."""
    async with (
        serving(dashboard_app.build_app(settings()), free_port()) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        yield http


async def test_without_the_token_nothing_but_health_answers() -> None:
    async with (
        serving(dashboard_app.build_app(settings()), free_port()) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        for path in ("/", "/api/config", "/api/overview", "/api/rollouts", "/static/dashboard.js"):
            refused = await http.get(path)
            assert refused.status_code == 401, path
            assert "/?token=" in refused.json()["error"]
        assert (await http.get("/api/config", headers={"Authorization": "Bearer wrong"})).status_code == 401
        assert (await http.get("/api/config", headers={"Cookie": "voltbus_dashboard=wrong"})).status_code == 401
        assert (await http.get("/?token=wrong")).status_code == 401
        assert (await http.get("/health")).json() == {"state": "ok"}


async def test_a_browser_signs_in_once_and_keeps_the_token_in_a_strict_cookie() -> None:
    async with (
        serving(dashboard_app.build_app(settings()), free_port()) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        signed = await http.get(f"/?token={TOKEN}")
        assert signed.status_code == 303 and signed.headers["location"] == "/"  # the token leaves the address bar
        cookie = signed.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        assert (await http.get("/")).status_code == 200  # the client kept the cookie
        assert (await http.get("/api/config")).status_code == 200
        page_elsewhere = await http.get("/api/config", headers={"Origin": "http://evil.example"})
        assert page_elsewhere.status_code == 403  # the cookie is no pass for another page's request


async def test_a_script_sends_the_token_as_a_bearer_header() -> None:
    async with (
        serving(dashboard_app.build_app(settings()), free_port()) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        assert (await http.get("/api/config", headers={"Authorization": f"Bearer {TOKEN}"})).status_code == 200


async def test_without_a_token_it_will_not_listen_beyond_loopback() -> None:
    with pytest.raises(Exposed, match="VOLTBUS_DASHBOARD__TOKEN"):
        await dashboard_app.run(settings(token=None, host="0.0.0.0"))


def test_deployments_generate_the_token_for_the_dashboard_and_the_operator(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ensure_credentials(tmp_path, Topology(namespace="vb"), rounds=4)
    token = read_env_file(tmp_path / "dashboard.env")["VOLTBUS_DASHBOARD__TOKEN"]
    assert len(token) >= 32 and read_env_file(tmp_path / "admin.env")["VOLTBUS_DASHBOARD__TOKEN"] == token
    assert "VOLTBUS_DASHBOARD__TOKEN" not in read_env_file(tmp_path / "runner.env")
