"""The learner: algorithms driven as one more consumer of the log. The service core sits here
(``app``, ``session``, ``checkpoints``, ``evaluate``, ``backend``); ``grpo/``, ``apo/``, ``verl/``
and ``vllm/`` hold the algorithms and backends, reached from the core only through ``app.run`` (the
algorithm) and ``backend.load_actor`` (the actor backend)."""
