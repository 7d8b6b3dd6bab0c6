"""The runner: claims rollouts, runs the user's agent on them, records spans and rewards, heartbeats."""
