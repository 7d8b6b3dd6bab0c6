"""The learner's layout: the service core reaches the algorithm and backend subpackages only at its two
dispatch points, the subpackages import one way, and the core, APO and the trainer load no torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import voltbus.services.learner as learner

ROOT = Path(learner.__file__).parent
PACKAGE = "voltbus.services.learner"
SUBPACKAGES = ("apo", "grpo", "verl", "vllm")
MAY_IMPORT = {
    "core": {"core"},
    "grpo": {"core", "grpo", "vllm"},
    "apo": {"core", "apo"},
    "verl": {"core", "grpo", "verl"},
    "vllm": {"vllm"},
}
"""Which units each unit imports: grpo pushes through vllm, verl implements grpo's actor."""
DISPATCH = {("app", "grpo"), ("backend", "grpo"), ("backend", "verl")}
"""The core's only imports of subpackages: the service's algorithm and the actor backend."""


def unit(dotted: str) -> str:
    """``grpo`` for ``grpo.loop``, ``core`` for a module at the top of the package.

    >>> unit("grpo.loop"), unit("session"), unit("vllm")
    ('grpo', 'core', 'vllm')
    """
    head = dotted.split(".")[0]
    return head if head in SUBPACKAGES else "core"


def learner_imports(path: Path) -> list[tuple[str, bool]]:
    """The learner modules ``path`` imports (relative to the package), each with whether the import is
    at module level (not inside a function)."""
    here = path.relative_to(ROOT).with_suffix("").parts[:-1]  # the module's package, relative
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(here[: len(here) - node.level + 1])
            names = [*base, *node.module.split(".")] if node.module else base
            targets = [".".join(names)] if names else [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom | ast.Import):
            absolute = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            targets = [t.removeprefix(PACKAGE + ".") for t in absolute if t.startswith(PACKAGE + ".")]
        else:
            continue
        found += [(t, id(node) in top) for t in targets]
    return found


def modules() -> dict[str, Path]:
    """Every learner module, by its dotted name relative to the package."""
    return {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in sorted(ROOT.rglob("*.py"))}


def test_the_subpackages_exist_and_hold_the_algorithms() -> None:
    names = set(modules())
    assert {"grpo.loop", "grpo.objective", "apo.loop", "verl.actor", "vllm.push"} <= names
    assert not [n for n in names if n.startswith(("apo_", "verl_", "vllm_"))]


def test_imports_point_one_way() -> None:
    wrong = []
    for name, path in modules().items():
        mine = unit(name)
        for target, _ in learner_imports(path):
            theirs = unit(target)
            if theirs not in MAY_IMPORT[mine] and (name, theirs) not in DISPATCH:
                wrong.append(f"{name} -> {target}")
    assert wrong == []


def test_the_core_dispatches_inside_functions_only() -> None:
    at_import = [
        f"{name} -> {target}"
        for name, path in modules().items()
        if unit(name) == "core"
        for target, top in learner_imports(path)
        if top and unit(target) != "core"
    ]
    assert at_import == []


def test_the_core_apo_and_the_trainer_load_no_torch() -> None:
    code = (
        "import sys\n"
        "import voltbus.services.learner.app, voltbus.services.learner.backend, voltbus.services.learner.checkpoints\n"
        "import voltbus.services.learner.apo.loop, voltbus.services.learner.grpo.validate\n"
        "import voltbus.services.learner.vllm.push, voltbus.trainer.algorithms, voltbus.trainer.apo\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
