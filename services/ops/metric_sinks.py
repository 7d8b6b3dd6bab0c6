"""Where ``voltbus metrics`` writes a run: TensorBoard event files (tensorboardX), an MLflow tracking store
(a SQLite file by default, or any tracking URI) or a Weights & Biases offline run. Each package is imported
only when its sink is opened (the ``metrics`` extra installs them)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Literal, Protocol

from voltbus.schemas.errors import InvalidCommand

SinkName = Literal["tensorboard", "mlflow", "wandb"]
PACKAGES = {"tensorboard": "tensorboardX", "mlflow": "mlflow-skinny", "wandb": "wandb"}
"""The package each sink needs (all in ``pip install 'voltbus[metrics]'``)."""
MAX_PARAM = 6000
"""Longest MLflow parameter value it accepts; a longer config value is cut."""


class Sink(Protocol):
    """One run's writer: started once, then its steps, maybe its end, then closed."""

    def start(self, algorithm: str, config: Any, at: float) -> None: ...
    def step(self, step: int, metrics: dict[str, float], at: float) -> None: ...
    def finish(self, status: str, reason: str | None) -> None: ...
    def close(self) -> None: ...


def _needs(name: SinkName) -> InvalidCommand:
    return InvalidCommand(f"--to {name} needs the {PACKAGES[name]} package: pip install 'voltbus[metrics]'")


def flat(config: Any, prefix: str = "") -> dict[str, str]:
    """A run's config as flat ``a.b`` keys and JSON text values (MLflow parameters).

    >>> flat({"lr": 0.1, "model": {"name": "tiny", "layers": [1, 2]}})
    {'lr': '0.1', 'model.name': '"tiny"', 'model.layers': '[1, 2]'}
    """
    if not isinstance(config, dict):
        return {prefix or "config": json.dumps(config)}
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        out |= flat(value, name) if isinstance(value, dict) and value else {name: json.dumps(value)}
    return out


class TensorBoardSink:
    """Scalars per step in ``<out>/<run_id>`` (the run's config as text at step 0)."""

    def __init__(self, out: Path, run_id: str) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise _needs("tensorboard") from None
        self.path = out / run_id
        self.writer = SummaryWriter(logdir=str(self.path))

    def start(self, algorithm: str, config: Any, at: float) -> None:
        self.writer.add_text("run/config", json.dumps({"algorithm": algorithm, "config": config}), 0, walltime=at)

    def step(self, step: int, metrics: dict[str, float], at: float) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, global_step=step, walltime=at)
        self.writer.flush()  # a follower shows each step as it comes

    def finish(self, status: str, reason: str | None) -> None:
        self.writer.add_text("run/status", f"{status}: {reason}" if reason else status)

    def close(self) -> None:
        self.writer.close()


class MlflowSink:
    """One MLflow run per voltbus run (tag ``voltbus.run_id``) in experiment ``project`` of ``uri``."""

    STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "cancelled": "KILLED"}

    def __init__(self, uri: str, project: str, run_id: str) -> None:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise _needs("mlflow") from None
        self.client, self.run_id, self.uri = MlflowClient(tracking_uri=uri), run_id, uri
        found = self.client.get_experiment_by_name(project)
        self.experiment = found.experiment_id if found else self.client.create_experiment(project)
        same = self.client.search_runs([self.experiment], f"tags.`voltbus.run_id` = '{run_id}'", max_results=1)
        if same:
            raise InvalidCommand(
                f"MLflow experiment {project!r} at {uri} already holds run {run_id} (MLflow run "
                f"{same[0].info.run_id}): delete it or write to another --project or --out"
            )
        self.mlflow_run = ""

    def start(self, algorithm: str, config: Any, at: float) -> None:
        from mlflow.entities import Param

        tags = {"voltbus.run_id": self.run_id, "voltbus.algorithm": algorithm}
        run = self.client.create_run(self.experiment, int(at * 1000), tags, run_name=self.run_id)
        self.mlflow_run = run.info.run_id
        params = {"algorithm": algorithm} | flat(config)
        safe = [Param(re.sub(r"[^\w\-. /]", "_", k), v[:MAX_PARAM]) for k, v in params.items()]
        for i in range(0, len(safe), 100):  # log_batch takes at most 100 parameters
            self.client.log_batch(self.mlflow_run, params=safe[i : i + 100])

    def step(self, step: int, metrics: dict[str, float], at: float) -> None:
        from mlflow.entities import Metric

        stamp = int(at * 1000)
        rows = [Metric(re.sub(r"[^\w\-. /]", "_", k), v, stamp, step) for k, v in metrics.items()]
        self.client.log_batch(self.mlflow_run, metrics=rows)

    def finish(self, status: str, reason: str | None) -> None:
        if reason:
            self.client.set_tag(self.mlflow_run, "voltbus.reason", reason[:MAX_PARAM])
        self.client.set_terminated(self.mlflow_run, self.STATUS.get(status, "FINISHED"), int(time.time() * 1000))

    def close(self) -> None:
        """Nothing to flush: each call above was written when it returned."""


class WandbSink:
    """A Weights & Biases run in offline mode under ``<out>/wandb`` (``wandb sync`` uploads it later)."""

    def __init__(self, out: Path, project: str, run_id: str) -> None:
        try:
            import wandb
        except ImportError:
            raise _needs("wandb") from None
        self.wandb, self.out, self.project, self.run_id, self.run = wandb, out, project, run_id, None

    def start(self, algorithm: str, config: Any, at: float) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        settings = self.wandb.Settings(silent=True, console="off", x_disable_stats=True, disable_git=True)
        self.run = self.wandb.init(
            mode="offline",
            dir=str(self.out),
            project=self.project,
            name=self.run_id,
            id=self.run_id if re.fullmatch(r"[\w-]+", self.run_id) else None,
            config={"algorithm": algorithm, "voltbus_run_id": self.run_id}
            | (config if isinstance(config, dict) else {}),
            settings=settings,
            reinit="create_new",
        )

    def step(self, step: int, metrics: dict[str, float], at: float) -> None:
        self.run.log(dict(metrics), step=step)

    def finish(self, status: str, reason: str | None) -> None:
        self.run.summary["voltbus_status"] = status
        if reason:
            self.run.summary["voltbus_reason"] = reason

    def close(self) -> None:
        if self.run is not None:
            failed = self.run.summary.get("voltbus_status") in ("failed", "cancelled")
            self.run.finish(exit_code=1 if failed else 0)
            self.run = None
            self.wandb.teardown()  # finish returns before wandb's service wrote the run file; teardown waits for it


def open_sink(name: SinkName, out: Path | str, project: str, run_id: str) -> Sink:
    """The sink ``--to name`` asks for, writing under ``out`` (for MLflow also a tracking URI)."""
    if name == "tensorboard":
        return TensorBoardSink(Path(out), run_id)
    if name == "wandb":
        return WandbSink(Path(out), project, run_id)
    uri = str(out)
    if "://" not in uri and not uri.startswith("sqlite:"):
        Path(uri).mkdir(parents=True, exist_ok=True)
        uri = f"sqlite:///{Path(uri).resolve() / 'mlflow.db'}"
    return MlflowSink(uri, project, run_id)
