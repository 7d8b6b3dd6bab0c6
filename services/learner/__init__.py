"""The learner: algorithms (GRPO on CPU torch, APO, baseline) driven as one more consumer of the log."""
