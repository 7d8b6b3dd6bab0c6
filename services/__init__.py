"""voltbus services: modules here are shared plumbing, each sub-package is a deployable service."""
