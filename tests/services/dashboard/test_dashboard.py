"""The dashboard against a live system: its JSON endpoints, and what headless Chromium draws."""

from __future__ import annotations

from pathlib import Path

import httpx
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from voltbus.services.settings import NatsSettings

from ...conftest import free_port
from . import workload
from .conftest import serving, system_settings

WAIT_S = 15
# What is drawn, read from the DOM: a status table's counts; a chart's points (data x, y, then cx, cy);
# each span's enclosing span.
TABLE = (
    "return Object.fromEntries([...document.querySelectorAll('{} tr[data-status]')]"
    ".map(r => [r.dataset.status, +r.querySelector('[data-n]').dataset.n]))"
)
POINTS = (
    "return [...document.querySelectorAll('{} circle.point{}')]"
    ".map(c => [+c.dataset.x, +c.dataset.y, +c.getAttribute('cx'), +c.getAttribute('cy')])"
)
# The status lines and tables that the first view checks, read at one instant.
SNAPSHOT = """
const q = s => document.querySelector(s);
return {{
  attempts: Object.fromEntries([...document.querySelectorAll('#attempt-statuses tr[data-status]')]
    .map(r => [r.dataset.status, +r.querySelector('[data-n]').dataset.n])),
  queue: q('#queue-size').innerText, banner: q('#banner').dataset.state,
  ended: [...document.querySelectorAll('#quality td[data-col="attempts"]')].map(td => td.innerText),
  health: q('#log-health').innerText, health_state: q('#log-health').dataset.state,
  worker: q('#workers tr[data-worker="{worker}"]').innerText,
}};
"""
# One rollout's detail: each span's sequence and enclosing span, the model call's text, the rewards.
DETAIL = """
const spans = [...document.querySelectorAll('#rollout-detail li.span')];
return {
  seqs: spans.map(li => li.dataset.seq),
  parents: spans.map(li => li.parentElement.closest('li.span')?.dataset.seq ?? null),
  call: document.querySelector('#rollout-detail tr.call').innerText,
  rewards: [...document.querySelectorAll('#rollout-detail tr.reward')].map(r => r.dataset.value),
};
"""


def counts(rows: list[dict[str, object]]) -> dict[str, object]:
    return {r["status"]: r["n"] for r in rows}


def drawn(browser: WebDriver, script: str) -> object:
    """What the page shows, read from its DOM."""
    return browser.execute_script(script)


# An element's text (an SVG element has no innerText), found and read in one step.
TEXT = "const e = document.querySelector(arguments[0]); return e ? (e.innerText ?? e.textContent) : null"
TEXTS = "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText ?? e.textContent)"


def text(browser: WebDriver, selector: str) -> str | None:
    """Read in one driver call: the page redraws between two (the element found goes stale)."""
    return browser.execute_script(TEXT, selector)


def texts(browser: WebDriver, selector: str) -> list[str]:
    return browser.execute_script(TEXTS, selector)


def pick(browser: WebDriver, select_id: str, value: str) -> None:
    """Choose an option as a user does, again if the page redrew the options meanwhile."""
    waiting(browser).until(lambda b: Select(b.find_element(By.ID, select_id)).select_by_value(value) or True)


def click(browser: WebDriver, selector: str) -> None:
    waiting(browser).until(lambda b: b.find_element(By.CSS_SELECTOR, selector).click() or True)


def waiting(browser: WebDriver) -> WebDriverWait:
    """A wait that reads again when the page replaced what it was reading."""
    return WebDriverWait(browser, WAIT_S, ignored_exceptions=(StaleElementReferenceException,))


def test_json_endpoints_answer_from_the_projections(live: dict[str, object]) -> None:
    url = live["url"]
    overview = httpx.get(f"{url}/api/overview").json()
    assert counts(overview["rollouts"]) == workload.ROLLOUTS
    assert counts(overview["attempts"]) == workload.ATTEMPTS
    workers = {w["worker_id"]: w for w in overview["workers"]}
    worker = workers[workload.WORKER]
    assert 0 <= worker["heartbeat_age_s"] < 60 and worker["stale"] is False
    assert [r["run_id"] for r in overview["runs"]] == [workload.EMPTY_RUN, workload.RUN]
    assert [(r["steps"], r["validations"]) for r in overview["runs"]] == [(0, 0), (4, 6)]
    assert overview["empty"] is False
    assert sum(q["attempts"] for q in overview["quality"]) == 8  # the attempts that ended (5 of them validation)
    assert overview["log_health"] == {"quarantined": 1, "gaps": 0, "divergences": 0}  # the workload's poison
    run = httpx.get(f"{url}/api/run", params={"run_id": workload.RUN}).json()
    assert [s["reward_mean"] for s in run["steps"]] == workload.REWARDS
    stale = [(s["staleness_mean"], s["staleness_max"], s["rows_dropped_stale"]) for s in run["steps"]]
    assert stale == workload.STALENESS
    v1, v2 = f"{workload.RUN}:1", f"{workload.RUN}:2"
    assert [s["sampled_with"] for s in run["steps"]] == [v1, v1, v2, v2]
    versions = [(v["resources_id"], v["rollouts"], round(v["reward_mean"], 6)) for v in run["versions"]]
    assert versions == [(v1, 2, 0.2), (v2, 2, 0.8)]
    one = httpx.get(f"{url}/api/rollout", params={"rollout_id": live["shown"]}).json()
    assert [s["sequence_id"] for s in one["spans"]] == [1, 2, 3, 4]
    [call] = one["calls"]
    assert (call["prompt_ids"], call["response_ids"], call["logprobs"]) == ([101, 102, 103], [7, 8], [-0.25, -1.5])
    assert (call["prompt_text"], call["response_text"]) == (f"user: {workload.PROMPT}", workload.ANSWER)
    assert [w["value"] for w in one["rewards"]] == [workload.ROLLOUT_REWARDS[0]]
    missing = httpx.get(f"{url}/api/rollout", params={"rollout_id": "ro-nope"}).json()
    assert missing["rollout"] is None and missing["spans"] == []
    page = httpx.get(url)
    assert page.status_code == 200 and "/static/dashboard.js" in page.text
    assert httpx.get(f"{url}/static/../app.py").status_code == 404


def test_the_page_draws_the_live_system(live: dict[str, object], browser: WebDriver) -> None:
    browser.get(live["url"])
    wait = waiting(browser)
    wait.until(lambda b: drawn(b, TABLE.format("#rollout-statuses")) == workload.ROLLOUTS)
    wait.until(lambda b: drawn(b, "return document.querySelector('#banner').dataset.state") != "loading")
    # The page redraws on every poll, so each read takes the DOM at one instant, in one script.
    shown = drawn(browser, SNAPSHOT.format(worker=workload.WORKER))
    assert shown["attempts"] == workload.ATTEMPTS
    assert shown["queue"] == "2" and shown["banner"] == "ok"
    assert sum(int(n) for n in shown["ended"]) == 8
    assert shown["health"].startswith("log: 1 events in quarantine, 0 gaps") and shown["health_state"] == "warn"
    assert shown["worker"].endswith("s ago")

    wait.until(lambda b: len(drawn(b, POINTS.format("#reward-chart", ".mean"))) == 4)
    reward = drawn(browser, POINTS.format("#reward-chart", ".mean"))
    assert [(x, y) for x, y, _, _ in reward] == list(enumerate(workload.REWARDS, start=1))
    assert [cx for _, _, cx, _ in reward] == sorted(cx for _, _, cx, _ in reward)
    by_height = [y for _, y in sorted((cy, y) for _, y, _, cy in reward)]  # top of the chart first
    assert by_height == sorted(workload.REWARDS, reverse=True)
    versions = drawn(browser, POINTS.format("#version-chart", ""))
    assert [round(y, 6) for _, y, _, _ in versions] == [0.2, 0.8] and versions[1][3] < versions[0][3]
    assert [y for _, y, _, _ in drawn(browser, POINTS.format("#staleness-chart", ".max"))] == [0, 1, 1, 1]
    dropped = drawn(
        browser,
        "return [...document.querySelectorAll('#staleness tr[data-step]')]"
        ".map(r => r.querySelector('td:last-child').textContent)",
    )
    assert dropped == ["0", "0", "2", "0"]

    pick(browser, "rollout-select", live["shown"])
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#rollout-detail li.span")) == 4)
    detail = drawn(browser, DETAIL)
    assert [int(seq) for seq in detail["seqs"]] == [1, 2, 3, 4]  # document order is sequence order
    assert detail["parents"] == [None, "1", "2", "1"]  # agent > (llm > tool, reward)
    call = detail["call"]
    assert "[101, 102, 103]" in call and "[7, 8]" in call and "-0.250" in call and "-1.500" in call
    assert [float(v) for v in detail["rewards"]] == [workload.ROLLOUT_REWARDS[0]]


def test_json_answers_what_runs_what_failed_and_validation(live: dict[str, object]) -> None:
    url = live["url"]
    overview = httpx.get(f"{url}/api/overview").json()
    order = [(w["worker_id"], w["stale"]) for w in overview["workers"]]
    live_ids = sorted(workload.LIVE, key=lambda w: int(w.split("-")[1]))  # Worker-2 before Worker-10
    assert order == [(w, False) for w in live_ids] + [(workload.WORKER, False)] + [(w, True) for w in workload.STALE]
    stale = [w for w in overview["workers"] if w["stale"]]
    assert all(w["heartbeat_age_s"] >= workload.STALE_AGE_S for w in stale)
    [failure] = overview["failures"]
    assert (failure["status"], failure["error_type"], failure["error_message"]) == (
        "failed",
        "Error",
        "reported failed",
    )
    assert overview["failure_causes"] == [
        {"status": "failed", "error_type": "Error", "n": 1, "last_end_time": failure["end_time"]}
    ]
    run = httpx.get(f"{url}/api/run", params={"run_id": workload.RUN}).json()
    shown = [(v["step"], round(v["reward_mean"], 6), f"{v['ended']} of {v['rollouts']}") for v in run["validation"]]
    assert shown == workload.VALIDATION_SHOWN
    empty = httpx.get(f"{url}/api/run", params={"run_id": workload.EMPTY_RUN}).json()
    assert empty["steps"] == empty["validation"] == []


# What the first screen shows (1400 x 900): where Training starts, the runners' rows and summary, the staleness axis.
GLANCE = """
const q = s => document.querySelector(s);
return {
  training_top: q('#training').getBoundingClientRect().top, height: window.innerHeight,
  run: q('#run-select').value,
  live: [...document.querySelectorAll('#workers tr[data-worker]')].map(r => r.dataset.worker),
  stale: [...document.querySelectorAll('#stale-workers tr[data-worker]')].map(r => r.dataset.worker),
  stale_open: q('#stale-runners').open, summary: q('#runner-summary').innerText,
  stale_summary: q('#stale-summary').innerText,
  ticks: [...document.querySelectorAll('#staleness-chart text.y-tick')].map(t => t.textContent),
  why: [...document.querySelectorAll('#failures tr.failure td.why')].map(td => td.innerText),
  causes: q('#failure-causes').innerText,
};
"""
CALL = """
const row = document.querySelector('#rollout-detail tr.call');
return row && {
  prompt: row.querySelector('td.prompt-text').innerText, response: row.querySelector('td.response-text').innerText,
  markup: row.querySelectorAll('td.prompt-text b, td.response-text b').length,
  ids: row.querySelector('td.ids').innerText, visible: row.getBoundingClientRect().width > 0,
  head: document.querySelector('#rollout-head').innerText,
  total: document.querySelector('#rollout-detail .reward-total')?.dataset.total,
};
"""


def test_the_page_answers_at_a_glance(live: dict[str, object], browser: WebDriver) -> None:
    """Is training improving, what runs now, what failed and why, what one rollout said and was rewarded."""
    browser.set_window_size(1400, 900)
    try:
        browser.get(live["url"])
        wait = waiting(browser)
        wait.until(lambda b: len(drawn(b, POINTS.format("#validation-chart", ".val"))) == 3)
        glance = drawn(browser, GLANCE)
        assert glance["run"] == workload.RUN  # the newest run with data, not the newer empty one
        assert glance["training_top"] < glance["height"] / 2  # above the fold, whatever the runners
        assert glance["live"] == sorted(workload.LIVE, key=lambda w: int(w.split("-")[1])) + [workload.WORKER]
        assert glance["stale"] == workload.STALE and glance["stale_open"] is False
        assert glance["summary"] == "65 live (8 busy, 57 idle), 2 stale"
        assert glance["stale_summary"].startswith("2 stale runner(s): no heartbeat for over")
        assert glance["ticks"] == ["0", "1"]  # staleness counts versions: whole numbers from 0
        assert glance["why"] == ["Error: reported failed"] and glance["causes"] == "failed (Error) × 1"
        validation = drawn(browser, POINTS.format("#validation-chart", ".val"))
        assert [(x, round(y, 6)) for x, y, _, _ in validation] == [(s, r) for s, r, _ in workload.VALIDATION_SHOWN]
        both = drawn(browser, POINTS.format("#reward-chart", ".val"))
        assert [(x, round(y, 6)) for x, y, _, _ in both] == [(s, r) for s, r, _ in workload.VALIDATION_SHOWN]
        assert len(drawn(browser, POINTS.format("#reward-chart", ".mean"))) == len(workload.REWARDS)
        ended = [e for _, _, e in workload.VALIDATION_SHOWN]
        assert texts(browser, "#validation tr[data-version] td:nth-child(3)") == ended

        pick(browser, "run-select", workload.EMPTY_RUN)  # a run the user picks stays picked, even without data
        wait.until(lambda b: text(b, "#reward-chart text") == "no data yet")
        stamp = text(browser, "#updated")
        wait.until(lambda b: text(b, "#updated") != stamp)  # a later poll
        assert browser.execute_script("return document.querySelector('#run-select').value") == workload.EMPTY_RUN

        click(browser, "#failures a[data-open]")  # the failure opens its rollout
        wait.until(lambda b: (text(b, "#rollout-head") or "").split(":")[0] == failed_rollout(live))
        pick(browser, "rollout-select", live["shown"])
        wait.until(lambda b: (drawn(b, CALL) or {}).get("head", "").startswith(live["shown"]))
        call = drawn(browser, CALL)
        assert call["prompt"] == f"user: {workload.PROMPT}" and call["response"] == workload.ANSWER
        assert call["markup"] == 0  # a prompt's HTML is text on the page, not elements
        assert call["ids"] == "[101, 102, 103]" and call["visible"]
        assert float(call["total"]) == workload.ROLLOUT_REWARDS[0]
    finally:
        browser.set_window_size(1400, 2000)


def failed_rollout(live: dict[str, object]) -> str:
    """The workload's one failed rollout, as the JSON says."""
    [failure] = httpx.get(f"{live['url']}/api/overview").json()["failures"]
    return failure["rollout_id"]


def test_no_data_yet(nats_settings: NatsSettings, tmp_path: Path, browser: WebDriver) -> None:
    with serving(system_settings(nats_settings, tmp_path)) as facts:
        overview = httpx.get(f"{facts['url']}/api/overview").json()
        assert overview["empty"] is True and overview["rollouts"] == overview["runs"] == []
        browser.get(facts["url"])
        waiting(browser).until(lambda b: b.find_element(By.ID, "banner").get_attribute("data-state") == "empty")
        assert "No data yet" in text(browser, "#banner")
        assert text(browser, "#reward-chart text") == "no data yet"


def test_projector_down(nats_settings: NatsSettings, tmp_path: Path, browser: WebDriver) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    settings = system_settings(nats_settings, tmp_path, projector_url=nowhere)
    with serving(settings, projector=False) as facts:
        answer = httpx.get(f"{facts['url']}/api/overview")
        assert answer.status_code == 503 and answer.json()["state"] == "down"
        assert f"no projector answers at {nowhere}" in answer.json()["error"]
        browser.get(facts["url"])
        banner = browser.find_element(By.ID, "banner")
        waiting(browser).until(lambda b: banner.get_attribute("data-state") == "down")
        assert nowhere in banner.text and "voltbus projector" in banner.text
