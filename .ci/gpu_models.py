"""The largest model that fits (``bash .ci/gpu``'s ``--model auto``): among the model directories on this machine,
offline, the largest whose GRPO run fits the GPU's free memory; prints what it picked, why, and what it skipped.

Candidates: the directories given (``.ci/gpu`` passes SmolLM2's from ``voltbus model fetch smollm2``), those in
``VOLTBUS_GPU_MODELS`` (``:``-separated) and Hugging Face's cache (``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``:
``*/snapshots/*``); each needs ``config.json`` and weights (``model.safetensors`` or an index and its shards).

The estimate (``needed_bytes``), per parameter, from the safetensors headers (only the headers are read):

- full training (verl's FSDP2 engine): fp32 weights 4 + fp32 gradients 4 + AdamW's two moments 8 = 16 bytes;
- LoRA: the frozen base in fp32, 4 bytes (the adapter and its optimizer state are well under 1% of that);
- serving: the engine's copy of the weights as stored (``voltbus inference``, or vLLM's share of them);

and then 25% more for activations and the allocator, plus 2 GiB for the CUDA contexts. No torch here: the CLI
asks torch for the free memory only when ``--free-gib`` is not given.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

GIB = 1 << 30
TRAIN_BYTES = {"full": 16, "lora": 4}
"""Bytes per parameter the learner holds, by mode."""
MARGIN = 1.25
"""Activations, the allocator's fragmentation and a micro-batch's logits."""
CONTEXTS = 2 * GIB
"""The CUDA contexts of the learner and the serving engine."""
DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I8": 1, "U8": 1, "BOOL": 1}
CONFIG_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class Candidate(NamedTuple):
    """A model directory and its size: ``params`` parameters stored in ``stored_bytes`` bytes."""

    path: Path
    params: int
    stored_bytes: int


def header(file: Path) -> dict:
    """A safetensors file's JSON header (its first 8 bytes give the header's length)."""
    with file.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(length))


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a model directory (none: not a model with weights)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
        return files if all(f.is_file() for f in files) else []
    return [folder / "model.safetensors"] if (folder / "model.safetensors").is_file() else []


def measure(folder: Path) -> Candidate | None:
    """``folder``'s parameters and stored bytes from its safetensors headers (None: no config.json or weights)."""
    files = weight_files(folder)
    if not (folder / "config.json").is_file() or not files:
        return None
    params = stored = 0
    for file in files:
        for name, tensor in header(file).items():
            if name != "__metadata__":
                params += math.prod(tensor["shape"])
                stored += math.prod(tensor["shape"]) * DTYPE_BYTES.get(tensor["dtype"], 4)
    return Candidate(folder, params, stored)


def discover(given: list[Path], env: dict[str, str], home: Path) -> list[Path]:
    """The candidate directories: ``given``, ``VOLTBUS_GPU_MODELS``'s and the HF cache's snapshots, each once."""
    listed = [Path(p) for p in env.get("VOLTBUS_GPU_MODELS", "").split(os.pathsep) if p]
    hub = Path(env["HF_HOME"]) / "hub" if env.get("HF_HOME") else home / ".cache" / "huggingface" / "hub"
    cached = sorted(hub.glob("*/snapshots/*")) if hub.is_dir() else []
    seen: dict[Path, None] = {}
    for path in [*given, *listed, *cached]:
        seen.setdefault(path.resolve(), None)
    return list(seen)


def needed_bytes(candidate: Candidate, mode: str) -> int:
    """GPU memory a GRPO run of ``candidate`` needs in ``mode`` (``full`` or ``lora``): see the module's doc."""
    learner = candidate.params * TRAIN_BYTES[mode]
    return int((learner + candidate.stored_bytes) * MARGIN) + CONTEXTS


def choose(candidates: list[Candidate], free_bytes: int, mode: str) -> tuple[Candidate | None, list[str]]:
    """The largest candidate whose run fits ``free_bytes`` in ``mode``, and one line per candidate saying why."""
    fitting, reasons = [], []
    for c in sorted(candidates, key=lambda c: (-c.params, str(c.path))):
        need = needed_bytes(c, mode)
        size = f"{c.path} ({c.params / 1e6:,.0f} M parameters, {mode} training needs {need / GIB:.1f} GiB"
        if need <= free_bytes:
            fitting.append(c)
            reasons.append(f"{'picked' if len(fitting) == 1 else 'smaller'}: {size})")
        else:
            reasons.append(f"skipped: {size}, {free_bytes / GIB:.1f} GiB free)")
    return (fitting[0] if fitting else None), reasons


def fail(message: str) -> None:
    """Stop with ``message`` on stderr and exit 2 (as ``.ci/gpu`` does)."""
    print(f"voltbus .ci/gpu_models.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def free_gpu_bytes() -> int:
    """The first CUDA device's free memory (torch.cuda.mem_get_info); exits 2 without a CUDA device."""
    import torch

    if not torch.cuda.is_available():
        fail("--model auto needs a CUDA GPU (torch sees none) to read its free memory; or pass --free-gib")
    return torch.cuda.mem_get_info()[0]


def pick(given: list[Path], mode: str, free_bytes: int | None = None, say: Callable[[str], None] = print) -> Path:
    """The chosen directory, the choice and every reason said; exits 2 when nothing fits or nothing is found."""
    free = free_gpu_bytes() if free_bytes is None else free_bytes
    found = [c for c in (measure(p) for p in discover(given, dict(os.environ), Path.home())) if c is not None]
    if not found:
        fail("no model directory found (config.json and safetensors weights): run voltbus model fetch smollm2, "
             "or list directories in VOLTBUS_GPU_MODELS")  # fmt: skip
    chosen, reasons = choose(found, free, mode)
    for line in reasons:
        say(f"model auto ({mode}): {line}")
    if chosen is None:
        fail(f"no model's {mode} training fits {free / GIB:.1f} GiB free")
    return chosen.path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="*", type=Path, help="model directories besides VOLTBUS_GPU_MODELS' and HF's")
    parser.add_argument("--mode", choices=sorted(TRAIN_BYTES), default="full")
    parser.add_argument("--free-gib", type=float, default=None, help="instead of the GPU's free memory")
    args = parser.parse_args(argv)
    free = None if args.free_gib is None else int(args.free_gib * GIB)
    print(pick(args.dirs, args.mode, free, say=lambda m: print(m, file=sys.stderr)))


if __name__ == "__main__":
    main()
