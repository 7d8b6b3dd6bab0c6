"""Attacks on the projector's SQL (``POST /sql``, ``voltbus sql --db``), issue 24 findings 1-5: each refused with
its status, and the projection (every table, row by row) and the file system left as they were."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import duckdb
import httpx
import pytest

from tests.conftest import wait_until
from tests.projections.conftest import dump, projected
from tests.projections.workload import write
from tests.test_cli import one_line_error, run
from voltbus.schemas.errors import QueryRefused
from voltbus.services.projector import app as projector_app
from voltbus.services.projector import sql as sql_module
from voltbus.services.projector.client import run_sql
from voltbus.services.projector.projector import Projector
from voltbus.services.serving import free_port, serving
from voltbus.services.settings import NatsSettings, ProjectorSettings, Settings
from voltbus.store import connect

TOKEN = "t0ken-for-tests"
WRITES = [
    "EXPLAIN ANALYZE INSERT INTO checkpoints VALUES ('x', 1, 1.0)",
    "EXPLAIN ANALYZE UPDATE rewards SET value = 100",
    "EXPLAIN ANALYZE DELETE FROM spans",
    "EXPLAIN ANALYZE DROP TABLE spans",
    "EXPLAIN ANALYZE CREATE TABLE evil AS SELECT 1",
    "EXPLAIN ANALYZE SET threads = 64",
    "/* hidden */ EXPLAIN (ANALYZE) UPDATE rewards SET value = 100",
    "SELECT 1; UPDATE rewards SET value = 100",
    "COMMIT; UPDATE rewards SET value = 100",
    "PIVOT rewards ON name",
    "CALL checkpoint()",
    "FROM checkpoint()",
    "SELECT * FROM query('FROM checkpoint()')",
    "SELECT (SELECT count(*) FROM force_checkpoint())",
    "WITH gone AS (DELETE FROM spans RETURNING *) SELECT count(*) FROM gone",
    "EXPLAIN ANALYZE WITH gone AS (DELETE FROM spans RETURNING *) SELECT count(*) FROM gone",
    "SELECT * FROM arrow_scan(1, 2, 3)",
    "SELECT setseed(0.5)",
    "ATTACH ':memory:' AS other",
    "INSTALL httpfs",
]


@pytest.fixture(scope="module")
def projection(tmp_path_factory: pytest.TempPathFactory, nats_server: object) -> Path:
    """A projection of a small log with rows in every table the attacks aim at (built once, copied per test)."""
    import asyncio

    path = tmp_path_factory.mktemp("sql") / "source.duckdb"

    async def build() -> None:
        store = await connect(settings=NatsSettings(url=nats_server.url, namespace="sqlattack"))  # type: ignore[attr-defined]
        try:
            await write(store, 12)
            await projected(store, path)
        finally:
            await store.close()

    asyncio.run(build())
    return path


@pytest.fixture
def db(projection: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "p.duckdb"
    copy.write_bytes(projection.read_bytes())
    return copy


@asynccontextmanager
async def endpoint(db: Path, **cfg: object) -> AsyncIterator[tuple[httpx.AsyncClient, Projector]]:
    """The SQL endpoint on ``db`` (token on), and a client that sends the token."""
    projector = Projector(db)
    settings = Settings(projector=ProjectorSettings(db=db, token=TOKEN, **cfg))  # type: ignore[arg-type]
    queries = projector_app.Queries(settings, projector)
    app = projector_app.build_app(settings, projector, projector_app.Progress(projector), queries)
    try:
        async with serving(app, free_port(), lifespan="off") as url:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
                yield http, projector
    finally:
        queries.stop()
        projector.close()


ENDLESS = "SELECT count(*) FROM range(100000000000000) t(i) WHERE i % 7 = 3"
"""A query of hours that nothing but an interrupt ends (``sum(i * i)`` overflows after about 3e9 rows)."""


def sql(text: str) -> dict[str, object]:
    return {"sql": text}


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[Path]:
    """A directory outside the database with a secret in it (as the data dir's auth/admin.env)."""
    secret = tmp_path / "auth" / "admin.env"
    secret.parent.mkdir()
    secret.write_text("VOLTBUS_NATS__PASSWORD=hunter2\n")
    yield tmp_path


async def test_writes_wrapped_in_explain_and_other_non_selects_are_refused_and_change_nothing(db: Path) -> None:
    """Findings 1 and 3: EXPLAIN ANALYZE of a write ran it on the projector's connection."""
    async with endpoint(db) as (http, projector):
        before = dump(projector.con)
        assert before["rewards"] and before["spans"]
        for text in WRITES:
            answer = await http.post("/sql", json=sql(text))
            assert answer.status_code == 403, (text, answer.text)
            assert answer.json()["code"] == "read_only" and "read-only" in answer.json()["error"]
        assert dump(projector.con) == before
        assert (await http.post("/sql", json=sql("SELECT count(*) FROM spans"))).status_code == 200
        explained = await http.post("/sql", json=sql("EXPLAIN ANALYZE SELECT sum(value) FROM rewards"))
        assert explained.status_code == 200  # reading plans stays allowed


async def test_copy_to_a_file_is_refused_so_no_code_can_be_planted(db: Path, outside: Path) -> None:
    """Finding 1: EXPLAIN ANALYZE COPY ... TO '<venv>/site-packages/x.pth' gave code execution."""
    target = outside / "x.pth"
    attacks = [
        f"EXPLAIN ANALYZE COPY (SELECT 'import os') TO '{target}' (HEADER false, QUOTE '')",
        f"COPY (SELECT 'import os') TO '{target}'",
        f"EXPORT DATABASE '{outside / 'dump'}'",
    ]
    async with endpoint(db) as (http, _):
        for text in attacks:
            answer = await http.post("/sql", json=sql(text))
            assert answer.status_code == 403, (text, answer.text)
    with pytest.raises(QueryRefused, match="read-only"):
        run_sql(Settings(projector=ProjectorSettings(db=db)), attacks[0], db)  # voltbus sql --db
    assert not target.exists() and not (outside / "dump").exists()


async def test_select_reads_no_file_but_the_database(db: Path, outside: Path) -> None:
    """Finding 2: read_text('<data-dir>/auth/admin.env') returned the admin password."""
    secret = outside / "auth" / "admin.env"
    attacks = [
        f"SELECT * FROM read_text('{secret}')",
        f"SELECT * FROM read_csv('{secret}')",
        f"SELECT * FROM glob('{outside}/*/*')",
        f"SELECT * FROM read_blob('{secret}')",
        f"SELECT * FROM '{secret}'",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_json('http://127.0.0.1:9/x.json')",
    ]
    async with endpoint(db) as (http, _):
        for text in attacks:
            answer = await http.post("/sql", json=sql(text))
            assert answer.status_code in (400, 403), (text, answer.text)  # 403: a reader refused by name
            assert "hunter2" not in answer.text and "root:" not in answer.text
    for text in attacks[:3]:  # the same on a file no projector holds
        with pytest.raises(QueryRefused) as refused:
            run_sql(Settings(projector=ProjectorSettings(db=db)), text, db)
        assert "hunter2" not in str(refused.value)


async def test_with_the_statement_check_off_the_query_still_cannot_write_or_reach_files(
    db: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second wall: a READ ONLY transaction on a database with no external access, whatever the parser missed."""
    monkeypatch.setattr(sql_module, "check_read_only", lambda text, con: None)
    target = outside / "x.pth"
    async with endpoint(db) as (http, projector):
        before = dump(projector.con)
        for text in [*WRITES[:6], f"COPY (SELECT 1) TO '{target}'", "SET enable_external_access = true"]:
            answer = await http.post("/sql", json=sql(text))
            assert answer.status_code == 400, (text, answer.text)
        assert dump(projector.con) == before and not target.exists()
        projector.con.execute("INSERT INTO gaps VALUES ('spans', 1, 2)")  # the projector's own writes go on
        assert projector.con.execute("SELECT count(*) FROM gaps WHERE after_seq = 1").fetchone() == (1,)


AS_CLIENT = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({"Authorization": None}, 401, "unauthorized"),
        ({"Authorization": "Bearer wrong"}, 401, "unauthorized"),
        ({"Authorization": f"Basic {TOKEN}"}, 401, "unauthorized"),
        ({"Content-Type": "text/plain"}, 415, "content_type"),
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415, "content_type"),
        ({"Origin": "http://evil.example"}, 403, "origin"),
        ({"Origin": "null"}, 403, "origin"),
        ({"Host": "evil.example:8765"}, 400, None),
    ],
)
async def test_requests_a_web_page_or_a_stranger_can_make_are_refused(
    db: Path, headers: dict[str, str | None], status: int, code: str | None
) -> None:
    """Finding 4: text/plain bodies (no CORS preflight), any Origin, any Host (DNS rebinding), no authentication."""
    async with endpoint(db) as (http, projector):
        before = dump(projector.con)
        sent = {k: v for k, v in {**AS_CLIENT, **headers}.items() if v is not None}
        async with httpx.AsyncClient(base_url=http.base_url) as stranger:
            answer = await stranger.post("/sql", content=b'{"sql": "SELECT 1"}', headers=sent)
        assert answer.status_code == status, answer.text
        if code is not None:
            assert answer.json()["code"] == code
        assert dump(projector.con) == before
        assert (await http.post("/sql", json=sql("SELECT 1"))).status_code == 200  # the client with the token


async def test_the_own_origin_and_allowed_hosts_pass(db: Path) -> None:
    async with endpoint(db, allowed_hosts=["projector"]) as (http, _):
        own = await http.post(
            "/sql", json=sql("SELECT 1"), headers={"Origin": f"http://{http.base_url.netloc.decode()}"}
        )
        named = await http.post("/sql", json=sql("SELECT 1"), headers={"Host": "projector:8765"})
        assert (own.status_code, named.status_code) == (200, 200)


def test_an_endpoint_without_a_token_listens_only_on_loopback(tmp_path: Path, nats_settings: NatsSettings) -> None:
    import asyncio

    from voltbus.services.httpguard import Exposed

    settings = Settings(nats=nats_settings, projector=ProjectorSettings(db=tmp_path / "p.duckdb", host="0.0.0.0"))
    with pytest.raises(Exposed, match="VOLTBUS_PROJECTOR__TOKEN"):
        asyncio.run(projector_app.run(settings))
    env = {"VOLTBUS_PROJECTOR__HOST": "0.0.0.0", "VOLTBUS_NATS__URL": nats_settings.url}
    error = one_line_error(run("projector", "--db", str(tmp_path / "p.duckdb"), env=env))
    assert "would listen on 0.0.0.0 with no token: set VOLTBUS_PROJECTOR__TOKEN" in error


async def test_a_runaway_query_is_interrupted_and_others_are_answered(db: Path) -> None:
    """Finding 5: eight endless queries starved the endpoint (``SELECT 1`` unanswered while /health said ok)."""
    import asyncio

    async with endpoint(db, sql_timeout_s=1.0, sql_slots=2) as (http, _):
        endless = [http.post("/sql", json=sql(ENDLESS)) for _ in range(8)]
        answers = await asyncio.gather(*endless, http.post("/sql", json=sql("SELECT 42 AS x")))
        statuses = [a.status_code for a in answers[:-1]]
        assert set(statuses) <= {408, 503} and 408 in statuses, [a.text for a in answers[:-1]]
        interrupted = next(a for a in answers[:-1] if a.status_code == 408)
        assert "interrupted" in interrupted.json()["error"] and "projector.sql_timeout_s" in interrupted.json()["error"]
        last = answers[-1] if answers[-1].status_code == 200 else await http.post("/sql", json=sql("SELECT 42 AS x"))
        assert last.status_code == 200


async def test_a_result_past_the_byte_limit_is_refused(db: Path) -> None:
    async with endpoint(db, max_result_bytes=100_000) as (http, _):
        big = await http.post("/sql", json=sql("SELECT repeat('x', 1000) FROM range(1000)"))
        assert big.status_code == 400 and big.json()["code"] == "too_large", big.text
        assert (await http.post("/sql", json=sql("SELECT repeat('x', 10) FROM range(100)"))).status_code == 200


def test_sql_on_a_file_is_interrupted_at_its_deadline(db: Path) -> None:
    settings = Settings(projector=ProjectorSettings(db=db, sql_timeout_s=0.5))
    with pytest.raises(QueryRefused, match="interrupted"):
        run_sql(settings, ENDLESS, db)


def test_a_query_that_starts_after_the_stop_is_still_interrupted(db: Path) -> None:
    """An interrupt that comes before DuckDB starts a query is lost: on a busy machine a projector stopping while a
    query's cursor was registered but not yet running waited for the query's whole hour."""
    projector = Projector(db)
    queries = projector_app.Queries(Settings(projector=ProjectorSettings(db=db, token=TOKEN)), projector)
    cursor = projector.con.cursor()
    queries.running.add(cursor)  # registered, not yet executing
    outcome: list[BaseException | None] = []

    def endless() -> None:
        try:
            cursor.execute(ENDLESS).fetchall()
            outcome.append(None)
        except duckdb.Error as exc:
            outcome.append(exc)

    try:
        queries.stop()
        thread = threading.Thread(target=endless, daemon=True)
        thread.start()
        wait_until(lambda: outcome, timeout=60, what="the query to be interrupted")
        assert isinstance(outcome[0], duckdb.InterruptException)
    finally:
        queries.running.discard(cursor)
        while not outcome:  # on failure, stop the query before the file is closed
            cursor.interrupt()
            thread.join(timeout=0.1)
        projector.close()


def test_a_projector_stops_on_sigterm_while_a_query_runs(tmp_path: Path, nats_settings: NatsSettings) -> None:
    """Finding 5: the projector ignored SIGTERM until SIGKILL while runaway queries ran."""
    port = free_port()
    env = {
        **os.environ,
        "VOLTBUS_NATS__URL": nats_settings.url,
        "VOLTBUS_NATS__NAMESPACE": nats_settings.namespace,
        "VOLTBUS_PROJECTOR__DB": str(tmp_path / "p.duckdb"),
        "VOLTBUS_PROJECTOR__PORT": str(port),
        "VOLTBUS_PROJECTOR__TOKEN": TOKEN,
        "VOLTBUS_PROJECTOR__SQL_TIMEOUT_S": "3600",
    }
    process = subprocess.Popen([sys.executable, "-m", "voltbus.services.projector"], env=env)
    url, headers = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {TOKEN}"}

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(healthy, timeout=60, what="the projector's endpoint")
        with httpx.Client(base_url=url, headers=headers, timeout=None) as http:
            import threading

            answers: list[httpx.Response | Exception] = []

            def endless() -> None:
                try:
                    answers.append(http.post("/sql", json=sql(ENDLESS)))
                except httpx.HTTPError as exc:
                    answers.append(exc)

            thread = threading.Thread(target=endless, daemon=True)
            thread.start()
            wait_until(lambda: httpx.get(f"{url}/health").json()["queries"] == 1, timeout=30, what="the query running")
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) is not None  # before the query's hour: it was interrupted
            thread.join(timeout=30)
            assert answers and not isinstance(answers[0], httpx.Response) or answers[0].status_code != 200
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def test_the_dashboard_answers_no_other_host_or_page() -> None:
    """DNS rebinding through the dashboard: a page at evil.example resolving to 127.0.0.1 read the projection."""
    from voltbus.services.dashboard import app as dashboard_app
    from voltbus.services.settings import DashboardSettings

    settings = Settings(dashboard=DashboardSettings(projector_url="http://127.0.0.1:9"))
    async with serving(dashboard_app.build_app(settings), free_port()) as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/")).status_code == 200
        assert (await http.get("/", headers={"Host": "evil.example"})).status_code == 400
        assert (await http.get("/api/config", headers={"Origin": "http://evil.example"})).status_code == 403
        own = await http.get("/api/config", headers={"Origin": url})
        assert own.status_code == 200


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b'{"sql": "SELECT 1", "params": 5}', 400),
        (b'{"sql": "SELECT 1", "timeout": "x", "min_seq": {"control": 1}}', 400),
        (b'{"sql": "SELECT 1", "min_seq": {"control": 1e400}}', 400),
        (b'{"sql": "SELECT 1", "min_seq": {"control": 1000000000000000000}, "timeout": 1e9}', 400),  # parked forever
        (b'{"sql": 5}', 400),
        (b'["SELECT 1"]', 400),
        (b'{"sql": "SELECT \xff"}', 400),
        (b'{"sql": "SELECT 1 AS ' + b"x" * (1 << 20) + b'"}', 413),
    ],
)
async def test_a_malformed_body_gets_400_or_413_never_500(db: Path, body: bytes, status: int) -> None:
    async with endpoint(db) as (http, _):
        answer = await http.post("/sql", content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == status, answer.text
        assert answer.json()["code"] in ("bad_request", "too_large")
        assert (await http.post("/sql", json=sql("SELECT 1"))).status_code == 200  # the same connection goes on
