"""APO: beam search over prompt templates with a critic model's textual gradients (no torch)."""
