"""Pushing a new policy version to vLLM servers, with the gateway paused and drained.

vLLM's OpenAI server does not follow the bus as the CPU inference server does, so the learner
pushes each version to it between steps (``learner.vllm_urls``), through vLLM's dev-mode routes
(``VLLM_SERVER_DEV_MODE=1``):

1. pause the gateway: ``POST /admin/pause`` (recorded as ``GatewayPaused``; new calls get 429);
2. wait until no call is in flight there: ``GET /admin/inflight?wait_s=<drain_timeout_s>``;
3. on every vLLM server at once: ``POST /pause?mode=wait``, ``POST /collective_rpc`` with
   ``{"method": "reload_weights", "kwargs": {"weights_path": "<version directory>"}}``,
   ``POST /reset_prefix_cache`` (cached prefixes were computed with the old weights),
   ``POST /update_weight_version {"new_version": "<resources id>"}`` and ``GET /weight_info``,
   which must then report that version (both skipped on a vLLM without them: 404), ``POST /resume``
   (with ``lora_rank``, vLLM's runtime LoRA API instead, ``lora.py``: the version's adapter loaded under its own
   model name and the previous one unloaded; no pause, reload or label on the server);
4. resume the gateway with what each engine now serves: ``POST /admin/resume {"versions":
   {"<vLLM URL>": "<resources id>"}}`` (recorded as ``GatewayResumed``); from then on the gateway
   labels the calls those engines serve with that version.

Whatever fails, cancelled included, every vLLM server asked to pause and the gateway are sent a
resume (also after a pause whose answer timed out: it may have been applied late; not after a
pause the gateway refused with an answer, which it did not apply). A server whose
reload failed, was not confirmed, or was cut short by a cancel is resumed as unknown (its calls are
recorded with no version, never a wrong one), one never touched keeps its version; if the gateway
refuses the resume carrying the versions, it is resumed with every reloaded server unknown. A
``VllmPushError`` names each server and its answer. Every request has a deadline
(``vllm_timeout_s``; the drain ``drain_timeout_s``) and says which one ran out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from voltbus.services.settings import LearnerSettings
from voltbus.services.urls import engine_root

from . import lora
from .http import VllmPushError, request

log = logging.getLogger(__name__)

ADMIN_TIMEOUT_S = 30.0
"""Deadline of the gateway's pause and resume answers."""


def version_dir(weights: str | Path) -> str:
    """The directory vLLM reloads: the version's directory (its ``model.safetensors`` file names it).

    >>> version_dir("/w/run/step-3/model.safetensors"), version_dir("/w/run/step-3/model.safetensors.index.json")
    ('/w/run/step-3', '/w/run/step-3')
    """
    path = Path(weights)
    return str(path.parent if path.suffix == ".safetensors" or path.name.endswith(".safetensors.index.json") else path)


@dataclass
class ServerSwap:
    """How one vLLM server's swap went."""

    url: str
    reloaded: bool = False
    """The reload was asked (its outcome decides what the gateway is told)."""
    labelled: bool = False
    """vLLM took the version label and reported it back (``/update_weight_version``, ``/weight_info``)."""
    error: str | None = None
    finished: bool = False
    """The swap ran to its end (False: cancelled on the way, its outcome unknown)."""

    def version(self, resources_id: str) -> str | None:
        """What the gateway is told this engine serves (call only when ``told``)."""
        return resources_id if self.finished and not self.error else None

    @property
    def told(self) -> bool:
        """The gateway must be told: the weights may have changed (an unfinished swap included)."""
        return self.reloaded or not self.finished


async def swap(http: httpx.AsyncClient, out: ServerSwap, resources_id: str, path: str, timeout: float) -> None:
    """Pause one vLLM server, reload its weights from ``path``, label them, resume it; every failure
    (a resume's too) is in ``out.error``. The resume is sent whatever happened, cancelled included: a
    pause that timed out may still be applied on the server (``mode=wait`` answers late)."""
    where, errors = f"vLLM server {out.url}", []
    try:
        what = f"{where}: POST /pause"
        must(await request(http, "POST", f"{out.url}/pause", what, timeout, params={"mode": "wait"}), what)
        out.reloaded = True
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": path}}
        what = f"{where}: reload_weights from {path}"
        must(await request(http, "POST", f"{out.url}/collective_rpc", what, timeout, json=rpc), what)
        what = f"{where}: POST /reset_prefix_cache"
        must(await request(http, "POST", f"{out.url}/reset_prefix_cache", what, timeout), what)
        out.labelled = await label(http, out.url, resources_id, timeout)
    except Exception as exc:  # a garbled answer too: the server must still be resumed, as unknown
        errors.append(str(exc) if isinstance(exc, VllmPushError) else f"{where}: {type(exc).__name__}: {exc}")
    finally:  # cancelled included: vLLM is never left paused
        try:
            await request(http, "POST", f"{out.url}/resume", f"{where}: POST /resume", timeout)
        except VllmPushError as exc:
            errors.append(str(exc))
        out.error = "; ".join(errors) or None
    out.finished = True


async def swap_adapter(
    http: httpx.AsyncClient, out: ServerSwap, settings: LearnerSettings, name: str | None, path: str
) -> None:
    """LoRA: serve adapter ``name`` (None: the base alone) on one vLLM server, its other adapters of this policy
    unloaded (``lora.load_adapter``); a failure is in ``out.error``, and the server is then labelled unknown."""
    out.reloaded = True  # whatever happens now, what it serves may have changed
    try:
        await lora.load_adapter(http, out.url, settings, name, path, settings.vllm_timeout_s)
    except Exception as exc:  # a garbled answer too
        out.error = (
            str(exc) if isinstance(exc, VllmPushError) else f"vLLM server {out.url}: {type(exc).__name__}: {exc}"
        )
    out.finished = True


def must(resp: httpx.Response, what: str) -> None:
    """A route that must exist: 404 is a failure."""
    if resp.status_code == 404:
        raise VllmPushError(f"{what}: 404 (start it with VLLM_SERVER_DEV_MODE=1)")


async def label(http: httpx.AsyncClient, base: str, resources_id: str, timeout: float) -> bool:
    """Set vLLM's weight-version label and read it back; False when this vLLM has no such routes."""
    what = f"vLLM server {base}: POST /update_weight_version"
    body = {"new_version": resources_id}
    if (await request(http, "POST", f"{base}/update_weight_version", what, timeout, json=body)).status_code == 404:
        return False
    what = f"vLLM server {base}: GET /weight_info"
    info = await request(http, "GET", f"{base}/weight_info", what, timeout)
    try:
        reported = info.json().get("weight_version") if info.status_code == 200 else None
    except (ValueError, AttributeError):
        reported = None
    if reported != resources_id:
        raise VllmPushError(f"{what}: reports weight_version {reported!r} after the update, not {resources_id!r}")
    return True


@dataclass
class PushReport:
    """What a push did, and how long each part took."""

    resources_id: str
    servers: list[ServerSwap] = field(default_factory=list)
    drain_s: float = 0.0
    swap_s: float = 0.0
    paused_s: float = 0.0


class GatewayAdmin:
    """The gateway's pause, drain and resume, as the learner calls them."""

    def __init__(self, http: httpx.AsyncClient, settings: LearnerSettings, timeout: float = ADMIN_TIMEOUT_S) -> None:
        self.http, self.base, self.timeout = http, engine_root(settings.gateway_url), timeout
        key = settings.gateway_admin_key
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    async def call(self, method: str, path: str, timeout: float, **kw: Any) -> dict[str, Any]:
        what = f"gateway {self.base}: {method} {path}"
        resp = await request(self.http, method, f"{self.base}{path}", what, timeout, headers=self.headers, **kw)
        if resp.status_code == 404:
            raise VllmPushError(f"{what}: 404", 404)
        return resp.json()

    async def pause(self, reason: str) -> None:
        await self.call("POST", "/admin/pause", self.timeout, json={"reason": reason})

    async def drain(self, timeout: float) -> dict[str, Any]:
        """The state after waiting for in-flight calls; VllmPushError when some are left at the deadline."""
        state = await self.call("GET", "/admin/inflight", timeout + self.timeout, params={"wait_s": timeout})
        if not state.get("drained"):
            n = state.get("inflight")
            raise VllmPushError(f"gateway {self.base}: {n} calls still in flight after {timeout:g} s; nothing pushed")
        return state

    async def resume(self, versions: dict[str, str | None]) -> None:
        """Resume with ``versions``; if that is refused, resume with every one of those engines unknown
        (None: their weights may have changed, so neither the old nor the new label is safe) and raise;
        VllmPushError saying so when the gateway stays paused."""
        try:
            await self.call("POST", "/admin/resume", self.timeout, json={"versions": versions})
        except VllmPushError as exc:
            unknown = dict.fromkeys(versions)
            try:
                await self.call("POST", "/admin/resume", self.timeout, json={"versions": unknown})
            except VllmPushError as again:
                raise VllmPushError(f"gateway left paused: {exc}; {again}") from None
            raise VllmPushError(f"gateway resumed with {sorted(unknown)} unknown: {exc}") from None


async def swap_all(
    http: httpx.AsyncClient,
    gw: GatewayAdmin,
    settings: LearnerSettings,
    report: PushReport,
    path: str,
    adapter: str | None = None,
) -> None:
    """With the gateway paused: drain it, then swap every server at once (``report.servers``): reload the
    weights, or with ``lora_rank`` serve the version's ``adapter`` (None: the base version)."""
    started = time.monotonic()
    state = await gw.drain(settings.drain_timeout_s)
    report.drain_s = time.monotonic() - started
    engines = state.get("versions") or {}
    unknown = [engine_root(u) for u in settings.vllm_urls if engine_root(u) not in engines]
    if unknown:
        raise VllmPushError(f"{', '.join(unknown)} not among the gateway's engines {list(engines)}")
    started = time.monotonic()
    # from here on, a cancel leaves them unknown
    report.servers = [ServerSwap(engine_root(u)) for u in settings.vllm_urls]
    timeout = settings.vllm_timeout_s
    if settings.lora_rank:
        await asyncio.gather(*(swap_adapter(http, out, settings, adapter, path) for out in report.servers))
    else:
        await asyncio.gather(*(swap(http, out, report.resources_id, path, timeout) for out in report.servers))
    report.swap_s = time.monotonic() - started


async def push(
    settings: LearnerSettings,
    resources_id: str,
    weights: str | Path,
    *,
    http: httpx.AsyncClient | None = None,
    admin_timeout_s: float = ADMIN_TIMEOUT_S,
    adapter: str | None = None,
) -> PushReport:
    """Load ``weights`` (the version's directory, or its ``model.safetensors``) on every
    ``settings.vllm_urls`` server as ``resources_id``, with the gateway paused and drained; with
    ``lora_rank``, as the LoRA adapter named ``adapter`` (``lora.py``; None: the base version)."""
    if http is None:
        async with httpx.AsyncClient() as client:
            return await push(
                settings, resources_id, weights, http=client, admin_timeout_s=admin_timeout_s, adapter=adapter
            )
    report, gw, path = PushReport(resources_id), GatewayAdmin(http, settings, admin_timeout_s), version_dir(weights)
    paused, errors, refused = time.monotonic(), [], False
    try:
        try:
            await gw.pause(f"weight swap to {resources_id}")
        except VllmPushError as exc:
            # the gateway itself refused (4xx, or its 503 when the bus did not record the pause): not paused;
            # no answer, or a proxy's 502/504: the pause may have been applied, so it is undone below
            refused = exc.status is not None and (400 <= exc.status < 500 or exc.status == 503)
            raise
        await swap_all(http, gw, settings, report, path, adapter)
        errors = [s.error for s in report.servers if s.error]
    except Exception as exc:  # a garbled answer too: the gateway must still be resumed
        errors.append(str(exc) if isinstance(exc, VllmPushError) else f"{type(exc).__name__}: {exc}")
    finally:  # cancelled included; a pause whose answer timed out may still have been applied
        try:
            if not refused:
                await gw.resume({s.url: s.version(resources_id) for s in report.servers if s.told})
        except VllmPushError as exc:
            log.error("learner/vllm_push %s: %s", resources_id, exc)  # raised below, unless cancelled
            errors.append(str(exc))
    report.paused_s = time.monotonic() - paused
    if errors:
        raise VllmPushError(f"weight push of {resources_id} failed: " + "; ".join(errors))
    log.info(
        "learner/vllm_push %s to %d servers: drain %.2fs, swap %.2fs, paused %.2fs",
        resources_id,
        len(report.servers),
        report.drain_s,
        report.swap_s,
        report.paused_s,
    )
    return report


async def push_if_configured(
    settings: LearnerSettings, resources_id: str, weights: str | Path, adapter: str | None = None
) -> PushReport | None:
    """``push`` when ``settings.vllm_urls`` names servers; None otherwise (the CPU path follows the bus)."""
    return await push(settings, resources_id, weights, adapter=adapter) if settings.vllm_urls else None
