"""The files a CPU learner leaves per version: every version keeps its weights (a servable model directory);
only the two newest keep the optimizer state a resume needs (it is twice the weights, at every step)."""

from __future__ import annotations

from pathlib import Path

import torch

from voltbus.services.learner.grpo.policy import OPTIMIZER, WEIGHTS, Policy
from voltbus.services.settings import LearnerSettings


def test_only_the_two_newest_versions_keep_their_optimizer_state(policy_dir: Path, tmp_path: Path) -> None:
    settings = LearnerSettings(model_dir=policy_dir, weights_dir=tmp_path)
    policy = Policy.load(settings)
    folders = [policy.save("run", step)[0].parent for step in range(3)]
    assert [(f / WEIGHTS).stat().st_mode & 0o777 for f in folders] == [0o644] * 3  # readable by a server
    assert [(f / OPTIMIZER).is_file() for f in folders] == [False, True, True]
    resumed = Policy.load(settings, checkpoint=folders[2])  # a resume from the newest one, optimizer included
    assert resumed.optimizer.state_dict()["param_groups"] == policy.optimizer.state_dict()["param_groups"]
    again = resumed.save("run", 3)[0].parent
    assert [(f / OPTIMIZER).is_file() for f in (*folders, again)] == [False, False, True, True]
    assert torch.equal(next(resumed.model.parameters()), next(policy.model.parameters()))
