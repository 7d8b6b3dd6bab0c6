"""Supervised fine-tuning of the tiny model, as the examples build theirs; the implementation is
``voltbus.services.clients.model.sft``."""

from voltbus.services.clients.model.sft import Segment, build_main, segments_batch, train_on_samples

__all__ = ["Segment", "build_main", "segments_batch", "train_on_samples"]
