"""What the handlers share: the loaded model, the batcher and the serving weights."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voltbus.services.settings import InferenceSettings

from .batching import Batcher
from .responses import TokenText
from .swap import Weights


@dataclass
class Served:
    """One served model."""

    name: str
    model_dir: Path
    model: Any
    tok: Any
    cfg: InferenceSettings
    """Settings with ``max_model_len`` resolved to a number."""
    weights: Weights
    batcher: Batcher
    text: TokenText
    started: int = field(default_factory=lambda: int(time.time()))
