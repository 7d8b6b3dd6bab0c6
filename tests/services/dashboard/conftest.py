"""A live system for the dashboard's tests: a real bus, projector and dashboard served from an asyncio loop in
a thread (Selenium blocks, so the servers cannot share the test's loop), and headless Chromium."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from voltbus.services.dashboard.app import run as run_dashboard
from voltbus.services.projector.app import run as run_projector
from voltbus.services.projector.follow import ends_at
from voltbus.services.settings import DashboardSettings, NatsSettings, ProjectorSettings, Settings
from voltbus.store import connect

from ...conftest import free_port, missing_browser
from . import workload

Workload = Callable[..., object] | None


def system_settings(nats: NatsSettings, tmp_path: Path, projector_url: str | None = None) -> Settings:
    port = free_port()
    projector = ProjectorSettings(db=tmp_path / "p.duckdb", port=port, url=f"http://127.0.0.1:{port}")
    # stale_s: the workload's live runners beat once; however slow the machine, they stay live during a test
    dashboard = DashboardSettings(port=free_port(), projector_url=projector_url, poll_s=0.5, stale_s=600)
    return Settings(nats=nats, projector=projector, dashboard=dashboard)


@contextmanager
def serving(settings: Settings, *, projector: bool = True, write: Workload = None) -> Iterator[dict[str, object]]:
    """Write ``write``'s workload, serve the projector (unless told not to) and the dashboard; yields the
    workload's facts plus ``url``, once the projector has applied everything written."""
    facts: dict[str, object] = {"url": f"http://127.0.0.1:{settings.dashboard.port}"}
    ready, failures, handle = threading.Event(), [], {}

    async def main() -> None:
        stop = asyncio.Event()
        handle.update(loop=asyncio.get_running_loop(), stop=stop)
        store = await connect(settings=settings.nats)
        try:
            if write is not None:
                facts.update(await write(store))
            facts["ends"] = await ends_at(store.log)
            async with asyncio.TaskGroup() as tasks:
                starts = [asyncio.Event(), asyncio.Event()]
                tasks.create_task(run_dashboard(settings, stop, starts[0]))
                if projector:
                    tasks.create_task(run_projector(settings, stop, starts[1]))
                else:
                    starts[1].set()
                await asyncio.gather(*(e.wait() for e in starts))
                ready.set()
        finally:
            await store.close()

    def target() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=target, name="dashboard-system", daemon=True)
    thread.start()
    try:
        assert ready.wait(30), "the system did not start within 30 s"
        assert not failures, failures
        if projector:  # the projector's own read-your-writes wait: it answers once it has applied `ends`
            body = {"sql": "SELECT 1", "min_seq": facts["ends"], "timeout": 15}
            assert httpx.post(f"{settings.projector.url}/sql", json=body, timeout=20).status_code == 200
        yield facts
    finally:
        if "loop" in handle:
            handle["loop"].call_soon_threadsafe(handle["stop"].set)
        thread.join(15)
        assert not thread.is_alive(), "the system did not stop"
        assert not failures, failures


@pytest.fixture
def live(nats_settings: NatsSettings, tmp_path: Path) -> Iterator[dict[str, object]]:
    """The dashboard workload, projected and served."""
    with serving(system_settings(nats_settings, tmp_path), write=workload.write) as facts:
        yield facts


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    """Headless Chromium driven by Selenium (Debian's ``chromium`` and ``chromium-driver``)."""
    binary, driver = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
    if not (binary and driver):
        missing_browser("the dashboard tests need Chromium: apt-get install chromium chromium-driver (see .ci/run)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,2000",
    ):
        options.add_argument(arg)
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    yield chrome
    chrome.quit()
