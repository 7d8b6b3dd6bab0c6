"""The whole system in one process, for ``Trainer.fit`` and the demo: coordinator, projector, CPU
inference server (following published versions), gateway, and a runner with the user's agent, each
on free loopback ports, all on the bus the settings name. Every part is the real service; only the
process boundary is gone. ``voltbus up`` runs the same parts as separate processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from voltbus.projections.adapter import AdapterSettings
from voltbus.services.coordinator.app import run as run_coordinator
from voltbus.services.gateway import build_app as gateway_app
from voltbus.services.projector.app import run as run_projector
from voltbus.services.runner.app import Runner
from voltbus.services.serving import free_port, serving
from voltbus.services.settings import Settings


def local_settings(settings: Settings, model_dir: Path | None, model_name: str, work: Path) -> Settings:
    """``settings`` with every service on a free loopback port, wired to each other."""
    inference, gateway, projector = free_port(), free_port(), free_port()
    s = settings.model_copy(deep=True)
    s.projector = s.projector.model_copy(
        update={"port": projector, "url": f"http://127.0.0.1:{projector}", "db": work / "projection.duckdb"}
    )  # noqa: E501
    s.inference = s.inference.model_copy(
        update={"model_dir": model_dir, "served_model_name": model_name, "port": inference, "follow_resources": True}
    )
    served = {"upstream_url": f"http://127.0.0.1:{inference}/v1"} if model_dir is not None else {}
    s.gateway = s.gateway.model_copy(update={"port": gateway, **served})  # no model: the engine the settings name
    if s.runner.mode == "isolate" and "gateway_url" not in settings.runner.model_fields_set:
        # isolated (Agent Lightning 1.0-style) agents get AGL_* variables pointing at this gateway
        s.runner = s.runner.model_copy(update={"gateway_url": f"http://127.0.0.1:{gateway}"})
    s.learner = s.learner.model_copy(
        update={
            "model_dir": model_dir,
            "served_model_name": model_name,
            "gateway_url": f"http://127.0.0.1:{gateway}/v1",
            "inference_urls": [f"http://127.0.0.1:{inference}"],
        }
    )
    return s


def _inference_app() -> Any:
    from voltbus.services.inference import build_app  # needs torch: only when a model is served

    return build_app


def run_group(settings: Settings) -> str:
    """The runner group of one ``Trainer`` call: ``runner.group`` when set, else a new one, so that runners already
    on the bus never serve its rollouts (docs/control-plane.md, "Runs sharing a bus")."""
    return settings.runner.group or f"trainer-{uuid.uuid4().hex[:12]}"


@asynccontextmanager
async def local_system(
    settings: Settings,
    agent: Any,
    n_runners: int = 8,
    group: str | None = None,
    *,
    adapter: AdapterSettings | None = None,
    hooks: Sequence[Any] = (),
) -> AsyncIterator[Settings]:
    """Run every service but the learner in this process until the block ends; yields the wired settings.
    Without ``learner.model_dir`` there is no model to serve: no inference server, and a gateway (in front of
    the engine ``gateway.upstream_url`` names) only when isolated agents were pointed at it. The runners serve
    ``group`` (default: ``runner.group``, the yielded settings' too): a caller's store client enqueues into it with
    ``store.runner_group = settings.runner.group``. ``adapter``: the projector's training-table settings (default
    ``AdapterSettings()``); ``hooks``: the runner's."""
    cfg = settings.learner
    scratch = tempfile.TemporaryDirectory(prefix="voltbus-run-")  # the projection: rebuilt from the log at will
    s = local_settings(settings, cfg.model_dir, cfg.served_model_name, Path(scratch.name))
    group = s.runner.group if group is None else group
    s.runner = s.runner.model_copy(update={"slots": n_runners, "claim_wait_s": 0.2, "group": group})
    stop = asyncio.Event()
    inference_app = None
    if cfg.model_dir is not None:  # import torch and transformers (seconds) before any service's loop work starts
        inference_app = await asyncio.to_thread(_inference_app)
    async with AsyncExitStack() as stack:
        stack.callback(scratch.cleanup)
        tasks: list[asyncio.Task[None]] = [asyncio.create_task(run_coordinator(s, stop))]
        ready = asyncio.Event()
        tasks.append(asyncio.create_task(run_projector(s, stop, ready, adapter=adapter)))
        await asyncio.wait_for(ready.wait(), 60)
        if inference_app is not None:
            await stack.enter_async_context(serving(inference_app(s), s.inference.port, http=s.http))
        if inference_app is not None or s.runner.gateway_url == f"http://127.0.0.1:{s.gateway.port}":
            await stack.enter_async_context(serving(gateway_app(s), s.gateway.port, http=s.http))
        runner = await stack.enter_async_context(Runner(s, agent, hooks))
        tasks.append(asyncio.create_task(runner.run(stop)))
        try:
            yield s
        finally:
            stop.set()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
