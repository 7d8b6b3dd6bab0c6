"""The learner's ranks as Ray actors (``services/learner/raylaunch.py``) on a local Ray of 2 CPUs started here: the
same update as one rank, a failing rank fails the launch with its error and stops the others, a cluster too small
is a clear error within the timeout, Ctrl-C tears the placement group down; and ``voltbus learner --ray-ranks 2``
through the whole system."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from voltbus.schemas.training import RunFinished, StepCompleted
from voltbus.services.learner.raylaunch import join, run_ranks
from voltbus.services.learner.session import LearnerError
from voltbus.services.settings import LearnerSettings, NatsSettings, RaySettings, Settings
from voltbus.trainer.system import local_system

from . import ray_ranks
from .agents import text_agent
from .ranks_step import differences, run_step
from .runs import run_events
from .test_resume import environment

ROOT = Path(__file__).resolve().parents[3]
VOLTBUS = str(Path(sys.executable).with_name("voltbus"))


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    temp = tmp_path_factory.mktemp("ray")
    ray.init(num_cpus=2, _temp_dir=str(temp), include_dashboard=False, object_store_memory=100 << 20)
    yield ray
    ray.shutdown()


def all_released(ray: Any, deadline_s: float = 60.0) -> bool:
    """Every CPU free again and every placement group removed, within the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        groups = ray.util.placement_group_table().values()
        if ray.available_resources().get("CPU") == 2.0 and all(g["state"] == "REMOVED" for g in groups):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_two_ranks_on_ray_give_the_update_of_one(ray_cluster: Any, policy_dir: Path, tmp_path: Path) -> None:
    one = run_step(policy_dir, tmp_path / "one", 1, 7, 2, 0.1)
    (out := tmp_path / "two").mkdir()
    said: list[str] = []
    run_ranks(RaySettings(ranks=2), partial(ray_ranks.step, policy_dir, out, 7, 2, 0.1), said.append)
    assert [line.split(" on node")[0] for line in said[:2]] == ["ray: rank 0 of 2", "ray: rank 1 of 2"]
    two = __import__("json").loads((out / "stats.json").read_text())
    single, rank0, rank1 = load_file(one["saved"]), load_file(two["saved"]), load_file(out / "rank-1.safetensors")
    start = load_file(policy_dir / "model.safetensors")
    assert float(differences(single, {k: start.get(k, single[k]) for k in single}).mean()) > 5e-4  # it moved
    apart = differences(rank0, single)  # test_ranks.py's tolerance (float sums in another order)
    assert float(apart.max()) < 5e-4 and float(apart.mean()) < 1e-7
    assert float(differences(rank0, {k: rank1[k] for k in rank0}).max()) == 0.0
    assert two["stats"]["tokens"] == one["stats"]["tokens"]
    for key in ("loss", "grad_norm", "clip_fraction", "approx_kl_old", "kl_ref"):
        assert two["stats"][key] == pytest.approx(one["stats"][key], rel=1e-4, abs=1e-6), key
    assert all_released(ray_cluster)


@pytest.mark.ray
@pytest.mark.parametrize(
    ("how", "error"), [("raise", "ValueError: rank 1 cannot go on"), ("exit", "rank 1 of 2 failed: ")]
)
def test_a_failing_rank_fails_the_launch_and_stops_the_others(ray_cluster: Any, how: str, error: str) -> None:
    with pytest.raises(LearnerError, match="learner rank 1 of 2 failed") as failed:
        run_ranks(RaySettings(ranks=2), partial(ray_ranks.fail, how), print)
    assert error in str(failed.value) and "the other ranks were stopped" in str(failed.value)
    assert all_released(ray_cluster)  # rank 0, waiting for rank 1 for a day, was stopped


@pytest.mark.ray
@pytest.mark.parametrize(("ranks", "strategy"), [(3, "PACK"), (2, "STRICT_SPREAD")])
def test_a_cluster_too_small_is_a_clear_error(ray_cluster: Any, ranks: int, strategy: str) -> None:
    started = time.monotonic()
    with pytest.raises(LearnerError) as failed:
        run_ranks(RaySettings(ranks=ranks, strategy=strategy, timeout_s=2), ray_ranks.wait, print)
    assert str(failed.value).startswith(f"the Ray cluster cannot place {ranks} learner ranks of {{'CPU': 1.0}} each")
    assert f"(strategy {strategy}) within 2 s: it has {{'CPU': 2.0}} in all" in str(failed.value)
    assert time.monotonic() - started < 60  # the timeout, not a hang
    assert all_released(ray_cluster)


@pytest.mark.ray
def test_ctrl_c_tears_the_placement_group_down(ray_cluster: Any) -> None:
    address = ray_cluster.get_runtime_context().gcs_address
    command = [sys.executable, "-m", "tests.services.learner.ray_ranks", address]
    # SIGINT at its default, as in a terminal: a job that a script starts in the background (as CI may start the
    # tests) inherits SIGINT ignored, Python keeps it so, and the launcher never saw the Ctrl-C (both CI failures)
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    launcher = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=default_sigint
    )
    assert launcher.stdout is not None
    lines = []
    for line in launcher.stdout:  # ends at the launcher's exit: the test's timeout bounds a hang
        lines.append(line)
        if line.startswith("ray: rank 1 of 2 on node"):
            break
    groups = ray_cluster.util.placement_group_table().values()
    assert [g["state"] for g in groups if g["state"] != "REMOVED"] == ["CREATED"], "".join(lines)
    rest = threading.Thread(target=lambda: lines.extend(launcher.stdout or []), daemon=True)
    rest.start()  # read on: a launcher whose pipe is full cannot exit
    launcher.send_signal(signal.SIGINT)
    try:
        assert launcher.wait(timeout=60) != 0
    finally:
        launcher.kill()
        rest.join(timeout=10)
    assert all_released(ray_cluster), "".join(lines)


def test_without_ray_the_launch_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as where it is not installed
    with pytest.raises(LearnerError, match=r"not installed: pip install 'voltbus\[ray\]' \(ray 2.60.0\)"):
        run_ranks(RaySettings(ranks=2), ray_ranks.wait, print)


@pytest.mark.ray
@pytest.mark.timeout(600)
async def test_the_learner_runs_on_two_ray_ranks_through_the_system(
    ray_cluster: Any, nats_settings: NatsSettings, policy_dir: Path, task_file: Path, tmp_path: Path
) -> None:
    settings = Settings(nats=nats_settings, learner=LearnerSettings(model_dir=policy_dir, weights_dir=tmp_path / "w"))
    address = ray_cluster.get_runtime_context().gcs_address
    async with local_system(settings, text_agent, n_runners=6) as s:
        env = {**environment(s, tmp_path / "w"), "VOLTBUS_LEARNER__RUN_ID": "run-ray", "VOLTBUS_LEARNER__STEPS": "2"}
        command = ["learner", "--tasks", str(task_file), "--ray-ranks", "2", "--ray-address", address]
        learner = await asyncio.create_subprocess_exec(
            VOLTBUS, *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        output, _ = await asyncio.wait_for(learner.communicate(), 480)
    text = output.decode(errors="replace")
    assert learner.returncode == 0, text[-4000:]
    assert "ray: rank 0 of 2 on node" in text and "ray: rank 1 of 2 on node" in text
    events = await run_events(s.nats, "run-ray")
    completed = [e for e in events if isinstance(e, StepCompleted)]
    assert [e.step for e in completed] == [0, 1] and all(e.metrics["tokens"] > 0 for e in completed)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    assert (tmp_path / "w" / "run-ray" / "step-1" / "model.safetensors").is_file()
    assert all_released(ray_cluster)


@pytest.mark.ray
def test_a_cluster_that_does_not_answer_is_a_clear_error() -> None:
    ray = pytest.importorskip("ray")
    started = time.monotonic()
    with pytest.raises(LearnerError, match="no Ray cluster answers at 127.0.0.1:1 "):
        join(ray, RaySettings(ranks=2, address="127.0.0.1:1", timeout_s=5))  # Ray itself would retry for minutes
    assert time.monotonic() - started < 30
