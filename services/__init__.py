"""voltbus services: modules here are shared plumbing, each sub-package is a deployable service (or a library
they share: ``eventlog``, ``lifecycle``), and ``ops`` holds the operations commands, which import the rest."""
