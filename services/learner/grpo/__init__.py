"""GRPO: the objective, a step's batch, the CPU torch policy and actor, the online loop and offline
retraining. Importing this package loads nothing; its modules (but ``validate``) need torch."""
