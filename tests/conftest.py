"""Shared fixtures: a real nats-server (random port, temporary store), fresh namespaces, clean env."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from voltbus.services.eventlog import EventLog
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.serving import free_port  # noqa: F401  (tests import it from here)
from voltbus.services.settings import BusSettings, NatsSettings, Settings

_names = itertools.count()
T = TypeVar("T")


@pytest.fixture(scope="session")
def user_data_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tests' stand-in for the user's data directory (``XDG_DATA_HOME``): the default bus store,
    weights and projection of any test (or subprocess) that leaves them unset land in pytest's
    temporary directory, never in the home directory of whoever runs the tests."""
    return tmp_path_factory.mktemp("user-data")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, user_data_home: Path) -> None:
    """No VOLTBUS_* variable from the developer's shell leaks into a test."""
    for key in list(os.environ):
        if key.startswith("VOLTBUS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_DATA_HOME", str(user_data_home))


def start_server(data_dir: Path) -> NatsServer:
    """A JetStream server on a free loopback port with its store in ``data_dir``."""
    return NatsServer(BusSettings(data_dir=data_dir, port=0, monitor_port=0), max_payload=1024 * 1024).start()


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One nats-server for the whole session; tests isolate themselves by namespace."""
    server = start_server(tmp_path_factory.mktemp("nats"))
    yield server
    server.stop()


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses (fresh streams and subjects)."""
    return f"t{os.getpid()}n{next(_names)}"


@pytest.fixture
def nats_settings(nats_server: NatsServer, namespace: str) -> NatsSettings:
    """Client settings pointing at the session server, in a fresh namespace."""
    return NatsSettings(url=nats_server.url, namespace=namespace, request_timeout_s=2.0, connect_timeout_s=1.0)


@pytest.fixture
async def eventlog(nats_settings: NatsSettings) -> AsyncIterator[EventLog]:
    """A connected EventLog whose streams exist."""
    log = await EventLog.connect(nats_settings)
    yield log
    await log.close()


CHECK_GRACE_S = 5.0
"""How long past ``wait_for``'s deadline a check begun before it may take to answer."""


async def wait_for(
    condition: Callable[[], T | Awaitable[T]], timeout: float = 10.0, what: str = "condition", every: float = 0.01
) -> T:
    """Wait until ``condition()`` holds (it may be a coroutine function: another process's state, read
    from the log or an HTTP endpoint), checking every ``every`` seconds, or fail after ``timeout``;
    returns what it returned (truthy). An exception it raises (a process that exited) ends the wait, and so does a
    check that does not return itself: it gets the time left and ``CHECK_GRACE_S`` more."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if inspect.isawaitable(result):
            try:
                result = await asyncio.wait_for(result, max(deadline - time.monotonic(), 0) + CHECK_GRACE_S)
            except TimeoutError:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}: its check hung") from None
        if result:
            return result  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(every)


@asynccontextmanager
async def running(
    run: Callable[[Settings, asyncio.Event, asyncio.Event], Awaitable[None]], settings: Settings, *, within: float = 30
) -> AsyncIterator[None]:
    """A service's ``run(settings, stop, ready)`` running in this test: waits up to ``within`` seconds for it to be
    ready, and on leaving sets its ``stop`` and awaits it."""
    stop, ready = asyncio.Event(), asyncio.Event()
    serving = asyncio.create_task(run(settings, stop, ready))
    await asyncio.wait_for(ready.wait(), within)
    try:
        yield
    finally:
        stop.set()
        await serving


def wait_until(condition: Callable[[], T], timeout: float = 10.0, what: str = "condition", every: float = 0.01) -> T:
    """``wait_for`` for code outside an event loop (a server thread starting, a subprocess's endpoint)."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)
    return result


# CI sets this (.ci/run) so that a missing browser fails the browser tests instead of skipping them; read once at
# import, before ``clean_env`` removes VOLTBUS_* variables from each test's environment.
REQUIRE_BROWSER = os.environ.get("VOLTBUS_TEST_REQUIRE_BROWSER", "") not in ("", "0")


def missing_browser(what: str, require: bool = REQUIRE_BROWSER) -> None:
    """A browser test whose browser is absent: skipped with the reason, or failed where CI requires the browser."""
    reason = f"{what} (set VOLTBUS_TEST_REQUIRE_BROWSER=1 to make this a failure, as .ci/run does)"
    if require:
        pytest.fail(f"{what}: VOLTBUS_TEST_REQUIRE_BROWSER is set, so the browser tests may not skip")
    pytest.skip(reason)


# CI sets these (.ci/run, .ci/al-venv): the interpreter of a venv holding the real agentlightning==0.3.0 (it cannot live
# in voltbus's venv: its OpenTelemetry pin differs), and whether a missing one fails the al_compat tests.
AL_PYTHON = os.environ.get("VOLTBUS_TEST_AL_PYTHON") or None
REQUIRE_AL = os.environ.get("VOLTBUS_TEST_REQUIRE_AL", "") not in ("", "0")


def al_python(given: str | None = AL_PYTHON, require: bool = REQUIRE_AL) -> str:
    """The Agent Lightning 0.3 interpreter of the al_compat tests: skipped with the reason when none is given, a
    failure where CI requires one."""
    if given and Path(given).is_file():
        return given
    what = f"the al_compat tests need VOLTBUS_TEST_AL_PYTHON, a venv with agentlightning==0.3.0 (.ci/al-venv): {given}"
    if require:
        pytest.fail(f"{what}: VOLTBUS_TEST_REQUIRE_AL is set, so they may not skip")
    pytest.skip(f"{what} (set VOLTBUS_TEST_REQUIRE_AL=1 to make this a failure, as .ci/run does)")
