"""``voltbus metrics``: a run's events on a real bus, written by the real TensorBoard, MLflow and W&B packages and
read back with their own readers (TensorBoard's EventAccumulator, MlflowClient, W&B's record protobuf)."""

from __future__ import annotations

import asyncio
import os
import struct
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from tests.conftest import wait_for
from voltbus.schemas.base import derive_id
from voltbus.schemas.errors import InvalidCommand
from voltbus.schemas.training import RunFinished, RunStarted, StepCompleted, StepStarted
from voltbus.services.eventlog import EventLog
from voltbus.services.ops.metric_sinks import open_sink
from voltbus.services.ops.run_metrics import export_run
from voltbus.services.settings import NatsSettings, Settings

RUN = "run-metrics"
CONFIG = {"lr": 0.01, "model": {"name": "tiny"}}
REWARDS = [0.2, 0.4, 0.5, 0.8]  # reward_mean of steps 0..3
LOSSES = [1.0, 0.7, 0.6, 0.4]


def step_events(step: int, reward: float, loss: float, tag: str = "") -> list[object]:
    metrics = {"reward_mean": reward, "train/loss": loss, "staleness_mean": 0.0}
    return [
        StepStarted(event_id=derive_id(RUN, "s", step, tag), run_id=RUN, step=step, at=10.0 + step),
        StepCompleted(event_id=derive_id(RUN, "c", step, tag), run_id=RUN, step=step, metrics=metrics,
                      resources_id=f"{RUN}:{step + 2}", at=10.5 + step),
    ]  # fmt: skip


async def write_run(log: EventLog, steps: range, *, start: bool = True, finish: bool = True) -> None:
    """The run's events: its start, ``steps`` (step 2 completed twice, as a resumed run does), its end."""
    events: list[object] = []
    if start:
        config = msgspec.Raw(msgspec.json.encode(CONFIG))
        events.append(RunStarted(event_id=derive_id(RUN), run_id=RUN, algorithm="grpo", config=config, at=9.0))
    for step in steps:
        events += step_events(step, REWARDS[step], LOSSES[step])
        if step == 2:  # the resumed learner completes it again, with other numbers: the first record counts
            events += step_events(step, 0.0, 9.0, "again")[1:]
    if finish:
        events.append(RunFinished(event_id=derive_id(RUN, "end"), run_id=RUN, status="succeeded", at=20.0))
    for event in events:
        await log.append([event])


@pytest.fixture
async def settings(eventlog: EventLog, nats_settings: NatsSettings) -> Settings:
    await write_run(eventlog, range(4))
    return Settings(nats=nats_settings)


async def test_tensorboard_event_files(settings: Settings, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    done = await export_run(settings, RUN, lambda: open_sink("tensorboard", tmp_path, "voltbus", RUN))
    assert (done.steps, done.repeated, done.finished) == ([0, 1, 2, 3], 1, "succeeded")
    events = EventAccumulator(str(tmp_path / RUN))
    events.Reload()
    assert [(e.step, round(e.value, 6), e.wall_time) for e in events.Scalars("reward_mean")] == [
        (s, r, 10.5 + s) for s, r in enumerate(REWARDS)
    ]
    assert [round(e.value, 6) for e in events.Scalars("train/loss")] == LOSSES
    assert {"run/config/text_summary", "run/status/text_summary"} <= set(events.Tags()["tensors"])


async def test_mlflow_tracking_store(settings: Settings, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    done = await export_run(settings, RUN, lambda: open_sink("mlflow", tmp_path / "mlruns", "exp", RUN))
    assert done.finished == "succeeded"
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert run.info.run_name == RUN and run.info.status == "FINISHED" and run.data.tags["voltbus.run_id"] == RUN
    assert run.data.params == {"algorithm": "grpo", "lr": "0.01", "model.name": '"tiny"'}
    history = client.get_metric_history(run.info.run_id, "reward_mean")
    assert [(m.step, round(m.value, 6), m.timestamp) for m in history] == [
        (s, r, int((10.5 + s) * 1000)) for s, r in enumerate(REWARDS)
    ]
    assert [round(m.value, 6) for m in client.get_metric_history(run.info.run_id, "train/loss")] == LOSSES
    with pytest.raises(InvalidCommand, match=f"already holds run {RUN}"):  # a second export would double the curves
        await export_run(settings, RUN, lambda: open_sink("mlflow", tmp_path / "mlruns", "exp", RUN))


def wandb_records(path: Path) -> list[object]:
    """The records of a W&B run file, decoded with wandb's own protobuf: its LevelDB-style log (a 7-byte
    ``:W&B`` header, then 32 KiB blocks of chunks: crc32c, length, type, data)."""
    from wandb.proto.wandb_internal_pb2 import Record

    data, records, chunk, pos, block = path.read_bytes(), [], b"", 7, 32768
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
        elif kind == 0:
            break
    return records


def name(item: object) -> str:
    """A W&B history item's metric name (``train/loss`` may come as a nested key)."""
    return item.key or "/".join(item.nested_key)  # type: ignore[attr-defined]


async def test_wandb_offline_run(settings: Settings, tmp_path: Path) -> None:
    done = await export_run(settings, RUN, lambda: open_sink("wandb", tmp_path, "proj", RUN))
    assert done.finished == "succeeded"
    [path] = (tmp_path / "wandb").glob(f"offline-run-*-{RUN}/run-{RUN}.wandb")
    records = wandb_records(path)
    kinds = [r.WhichOneof("record_type") for r in records]
    history = [
        (r.history.step.num, {name(i): msgspec.json.decode(i.value_json) for i in r.history.item})
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    assert [(s, round(m["reward_mean"], 6), round(m["train/loss"], 6)) for s, m in history] == [
        (s, r, loss) for s, (r, loss) in enumerate(zip(REWARDS, LOSSES, strict=True))
    ]
    [run] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.run_id, run.display_name, run.project) == (RUN, RUN, "proj")
    config = {u.key: msgspec.json.decode(u.value_json) for u in run.config.update}
    assert config["algorithm"] == "grpo" and config["lr"] == 0.01 and config["model"] == {"name": "tiny"}
    [exit_record] = [r.exit for r in records if r.WhichOneof("record_type") == "exit"]
    assert exit_record.exit_code == 0 and "exit" in kinds


async def test_follow_writes_new_steps_until_the_run_finishes(
    eventlog: EventLog, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    await write_run(eventlog, range(2), finish=False)
    caught_up = asyncio.Event()
    job = asyncio.create_task(
        export_run(
            Settings(nats=nats_settings),
            RUN,
            lambda: open_sink("tensorboard", tmp_path, "voltbus", RUN),
            follow=True,
            say=lambda line: caught_up.set() if "waiting for more" in line else None,
        )
    )
    await asyncio.wait_for(caught_up.wait(), 30)
    await write_run(eventlog, range(2, 4), start=False)

    def steps() -> list[int]:
        events = EventAccumulator(str(tmp_path / RUN))
        events.Reload()
        return [e.step for e in events.Scalars("reward_mean")] if "reward_mean" in events.Tags()["scalars"] else []

    await wait_for(lambda: steps() == [0, 1, 2, 3], timeout=30, what="the followed steps in the event file")
    done = await asyncio.wait_for(job, 30)  # RunFinished ends the follow by itself
    assert (done.steps, done.finished) == ([0, 1, 2, 3], "succeeded")


def test_cli_writes_a_run_and_refuses_an_unknown_one(settings: Settings, tmp_path: Path) -> None:
    env = {**os.environ, "VOLTBUS_NATS__URL": settings.nats.url, "VOLTBUS_NATS__NAMESPACE": settings.nats.namespace}
    cli = [sys.executable, "-c", "from voltbus.cli import main; main()", "metrics", "--to", "tensorboard"]
    out = tmp_path / "tb"
    ok = subprocess.run([*cli, "--run", RUN, "--out", str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert f"4 steps of run {RUN} written (run succeeded, 1 repeated steps skipped); tensorboard at {out}" in ok.stdout
    assert list((out / RUN).glob("events.out.tfevents.*"))
    bad = subprocess.run([*cli, "--run", "nope"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().startswith(f"voltbus: error: no run 'nope' on the bus at {settings.nats.url}")
    elsewhere = {**env, "VOLTBUS_NATS__NAMESPACE": "nosuch"}
    lost = subprocess.run([*cli, "--run", RUN], capture_output=True, text=True, env=elsewhere, timeout=120)
    assert lost.returncode == 1 and "Traceback" not in lost.stderr
    assert lost.stderr.strip() == (
        f"voltbus: error: no voltbus log in namespace nosuch on the bus at {settings.nats.url} "
        "(no stream NOSUCH_CTRL; check --nats-url and VOLTBUS_NATS__NAMESPACE)"
    )
    odd = subprocess.run([*cli, "--run", "a.b"], capture_output=True, text=True, env=env, timeout=120)
    assert odd.returncode == 1 and odd.stderr.strip().startswith("voltbus: error: invalid run id 'a.b'")
