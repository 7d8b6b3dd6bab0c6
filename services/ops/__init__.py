"""Operations commands that are not services: the embedded bus and its credentials, ``up``/compose, self-check,
backup and restore, reproject and training export, the generated references. They import the services and
the plumbing beside them; nothing in ``services/`` outside this package imports it."""
