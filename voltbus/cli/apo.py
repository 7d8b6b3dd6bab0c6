"""``voltbus apo``: the APO learner as a service, against a running system (runners serving the agent
elsewhere, a projector answering SQL): the same search as ``Trainer(algorithm=APO(...))``, spread over
machines."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

Opt = typer.Option


def apo_command(
    tasks: Annotated[Path, Opt("--tasks", help="training tasks: JSON Lines, or a .json array")],
    val_tasks: Annotated[Path, Opt("--val-tasks", help="validation tasks: JSON Lines, or a .json array")],
    prompt_file: Annotated[Path, Opt("--prompt-file", help="the starting prompt template (a text file)")],
    critic_url: Annotated[
        str | None, Opt("--critic-url", help="the critic's OpenAI-compatible base URL [env: OPENAI_BASE_URL]")
    ] = None,  # noqa: E501
    critic_model: Annotated[str, Opt("--critic-model", help="the critic's model name")] = "gpt-4.1-mini",
    resources: Annotated[
        Path | None, Opt("--resources", help="other resources: a JSON object of name -> resource")
    ] = None,  # noqa: E501
    prompt_resource: Annotated[str, Opt("--prompt-resource", help="the template's resource name")] = "prompt_template",
    engine: Annotated[str, Opt("--engine", help="f-string or jinja")] = "f-string",
    run_id: Annotated[str | None, Opt("--run-id", help="run to start or continue")] = None,
    rounds: Annotated[int, Opt(help="rounds of the search")] = 3,
    beam_width: Annotated[int, Opt("--beam-width", help="templates kept after each round")] = 4,
    branch_factor: Annotated[int, Opt("--branch-factor", help="children per parent")] = 4,
    val_batch_size: Annotated[int, Opt("--val-batch-size", help="validation tasks per round")] = 16,
    gradient_batch_size: Annotated[int, Opt("--gradient-batch-size", help="training tasks per critique")] = 4,
    nats_url: Annotated[str | None, Opt("--nats-url", help="NATS URL [env: VOLTBUS_NATS__URL]")] = None,
    projector_url: Annotated[
        str | None,
        Opt("--projector-url", help="the projector to query, checked to follow this bus [env: VOLTBUS_PROJECTOR__URL]"),
    ] = None,
) -> None:
    """Run APO (prompt search with a critic model) against running runners; resumes a stopped run id."""
    import msgspec

    from voltbus.schemas.errors import InvalidCommand
    from voltbus.schemas.resources import PromptTemplate, Resource
    from voltbus.services.learner.app import load_tasks
    from voltbus.trainer.apo import APO

    from .common import projector_checked, say, settings_for

    if not prompt_file.is_file():
        raise InvalidCommand(f"--prompt-file {prompt_file}: no such file")
    named: dict[str, Resource] = {}
    if resources is not None:
        try:
            named = msgspec.json.decode(resources.read_bytes(), type=dict[str, Resource])
        except (OSError, msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise InvalidCommand(f"--resources {resources}: {exc}") from None
    template = PromptTemplate(template=prompt_file.read_text().rstrip("\n"), engine=engine)  # type: ignore[arg-type]
    algo = APO(
        critic=critic_url, model=critic_model, run_id=run_id, prompt_resource=prompt_resource, rounds=rounds,
        beam_width=beam_width, branch_factor=branch_factor, val_batch_size=val_batch_size,
        gradient_batch_size=gradient_batch_size,
    )  # fmt: skip
    train, val = load_tasks(tasks), load_tasks(val_tasks)
    settings = projector_checked(settings_for(nats_url, projector_url))
    try:
        result = asyncio.run(algo.search_on(settings, {**named, prompt_resource: template}, train, val, say))
    except ValueError as exc:
        raise InvalidCommand(str(exc)) from None
    say(
        f"APO run {result['run_id']}: validation {result['before']:.3f} -> {result['after']:.3f}; best template "
        f"published as {result['resources_id']}:\n{result['template']}"
    )
