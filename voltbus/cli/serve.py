"""``voltbus`` commands that run a service in the foreground, one per deployable service."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Literal

import typer

from .common import DbOption, NatsUrl, ProjectorUrl, projector_checked, say, settings_for


def coordinator(nats_url: NatsUrl = None) -> None:
    """Run the coordinator: attempt timeouts and unresponsiveness, retries, dead letters."""
    from voltbus.services.coordinator.app import run

    settings = settings_for(nats_url)
    asyncio.run(run(settings))


def gateway(
    nats_url: NatsUrl = None,
    upstream: Annotated[
        list[str] | None,
        typer.Option(help="Engine base URL with /v1; repeat for several engines [env: VOLTBUS_GATEWAY__UPSTREAM_URLS]"),
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8766)")] = None,
) -> None:
    """Run the gateway: an OpenAI-compatible proxy that records every model call with its token ids."""
    from voltbus.services.gateway.app import main

    settings = settings_for(nats_url)
    updates = {"upstream_urls": upstream or None, "port": port}
    settings.gateway = settings.gateway.model_copy(update={k: v for k, v in updates.items() if v is not None})
    main(settings)


def projector(
    nats_url: NatsUrl = None, db: DbOption = None, port: Annotated[int | None, typer.Option()] = None
) -> None:
    """Run the projector: DuckDB read models from the log, and read-only SQL at /sql."""
    from voltbus.services.projector.app import run

    settings = settings_for(nats_url)
    settings.projector = settings.projector.model_copy(update={k: v for k, v in {"db": db, "port": port}.items() if v})
    asyncio.run(run(settings))


def dashboard(
    port: Annotated[int | None, typer.Option(help="Port (default 8780)")] = None,
    projector_url: Annotated[
        str | None, typer.Option(help="The projector's URL [env: VOLTBUS_DASHBOARD__PROJECTOR_URL]")
    ] = None,
) -> None:
    """Run the dashboard: a live web page of the projections (statuses, reward curve, runners, spans)."""
    from voltbus.services.dashboard.app import run

    settings = settings_for()
    updates = {"port": port, "projector_url": projector_url}
    settings.dashboard = settings.dashboard.model_copy(update={k: v for k, v in updates.items() if v is not None})
    asyncio.run(run(settings))


def store_server(
    nats_url: NatsUrl = None,
    projector_url: Annotated[
        str | None, typer.Option(help="The projector its queries read [env: VOLTBUS_PROJECTOR__URL]")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Interface (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 4747, Agent Lightning's)")] = None,
) -> None:
    """Serve Agent Lightning 0.3's HTTP store API (its LightningStoreClient, runners) and OTLP trace ingest."""
    from voltbus.services.storeserver.app import run

    settings = settings_for(nats_url, projector_url)
    updates = {"host": host, "port": port}
    settings.store_server = settings.store_server.model_copy(update={k: v for k, v in updates.items() if v is not None})
    asyncio.run(run(settings))


def runner(
    agent: Annotated[str, typer.Option("--agent", help="the agent, as module:attr")],
    n: Annotated[
        int | None, typer.Option("-n", help="rollouts run at once (default: VOLTBUS_RUNNER__SLOTS, else 1)", min=1)
    ] = None,
    isolate: Annotated[
        bool | None,
        typer.Option(
            "--isolate/--no-isolate",
            help="run each rollout in its own process, killed at its timeout; --no-isolate: not that, so the "
            "agent host unless VOLTBUS_RUNNER__AGENTS says otherwise (default: VOLTBUS_RUNNER__ISOLATE, else no)",
        ),
    ] = None,
    in_process: Annotated[
        bool,
        typer.Option(
            "--in-process",
            help="run agents inside the runner, which holds the bus credentials: for trusted agents only "
            "(default: the agent host, a process with no credentials)",
        ),
    ] = False,
    group: Annotated[
        str | None,
        typer.Option(
            "--group", help="serve only this runner group's rollouts (default: VOLTBUS_RUNNER__GROUP, else none)"
        ),
    ] = None,
    nats_url: NatsUrl = None,
) -> None:
    """Run a runner: claim rollouts and run the agent on them (SIGTERM finishes or releases them)."""
    from voltbus.services import loop
    from voltbus.services.runner.app import serve_until_signal

    if in_process and isolate:
        raise typer.BadParameter("--in-process and --isolate exclude each other")
    settings = settings_for(nats_url)
    agents = "in-process" if in_process else None
    # flags override the settings; absent ones leave them
    given = {"slots": n, "isolate": isolate, "agents": agents, "group": group}
    settings.runner = settings.runner.model_copy(update={k: v for k, v in given.items() if v is not None})
    loop.run(serve_until_signal(settings, agent))  # on uvloop: less CPU per rollout (BENCHMARKS.md)


def inference(
    model: Annotated[Path, typer.Option("--model", help="model directory [env: VOLTBUS_INFERENCE__MODEL_DIR]")],
    host: Annotated[str | None, typer.Option(help="Interface to bind (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8000)")] = None,
    name: Annotated[str | None, typer.Option(help="Served model name (default: the directory's name)")] = None,
    follow_resources: Annotated[bool, typer.Option(help="Hot-swap to each resources version naming it")] = False,
    nats_url: NatsUrl = None,
) -> None:
    """Run the CPU inference server: an OpenAI-compatible API with token ids, logprobs and hot swap."""
    from voltbus.services.inference.app import run

    settings = settings_for(nats_url)
    updates = {"model_dir": model, "host": host, "port": port, "served_model_name": name}
    updates |= {"follow_resources": True if follow_resources else None}
    settings.inference = settings.inference.model_copy(update={k: v for k, v in updates.items() if v is not None})
    asyncio.run(run(settings))


def learner(
    tasks: Annotated[Path, typer.Option("--tasks", help="training tasks: JSON Lines, or a .json array")],
    model: Annotated[
        Path | None, typer.Option("--model", help="starting model directory [env: VOLTBUS_LEARNER__MODEL_DIR]")
    ] = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="run to start or continue [env: VOLTBUS_LEARNER__RUN_ID]")
    ] = None,
    steps: Annotated[int | None, typer.Option(help="learner steps (default 20)")] = None,
    val_tasks: Annotated[
        Path | None, typer.Option("--val-tasks", help="validate on these tasks before and after")
    ] = None,
    time_budget_s: Annotated[
        float | None, typer.Option("--time-budget-s", help="stop after this much training")
    ] = None,
    ray_ranks: Annotated[
        int | None,
        typer.Option("--ray-ranks", min=0, help="run on this many ranks as Ray actors [env: VOLTBUS_RAY__RANKS]"),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option("--ray-address", help="Ray cluster to join: auto, HOST:6379 [env: VOLTBUS_RAY__ADDRESS]"),
    ] = None,
    ray_strategy: Annotated[
        Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] | None,
        typer.Option(
            "--ray-strategy", help="how the ranks spread over nodes (default PACK) [env: VOLTBUS_RAY__STRATEGY]"
        ),
    ] = None,
    nats_url: NatsUrl = None,
    projector_url: ProjectorUrl = None,
) -> None:
    """Run the GRPO learner: publish versions, enqueue batches, train on their rows, resume after a crash."""
    from voltbus.services.learner.app import load_tasks, main, refuse_early

    settings = settings_for(nats_url, projector_url)
    updates = {"model_dir": model, "run_id": run_id, "steps": steps, "val_tasks": val_tasks}
    updates["time_budget_s"] = time_budget_s
    settings.learner = settings.learner.model_copy(update={k: v for k, v in updates.items() if v is not None})
    ray = {"ranks": ray_ranks, "address": ray_address, "strategy": ray_strategy}
    settings.ray = settings.ray.model_copy(update={k: v for k, v in ray.items() if v is not None})
    loaded = load_tasks(tasks)
    refuse_early(settings, loaded)  # before the projector is asked who it is
    main(projector_checked(settings), loaded, say)
