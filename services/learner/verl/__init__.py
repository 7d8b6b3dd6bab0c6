"""The GPU backend of GRPO's actor: verl 0.9.1's FSDP2 training engine (the ``gpu`` extra). Chosen by
``learner.backend=verl``; ``backend.check_backend`` says what to install when verl or a GPU is missing."""
