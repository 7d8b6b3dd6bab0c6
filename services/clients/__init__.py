"""The services' shared clients, not a deployable service: the store client, the agent runtime, the span
vocabulary agent code emits, and the tiny model. Above the event log and the projections, below the
services; the SDK (``voltbus.store``, ``voltbus.agent``, ``voltbus.model``) re-exports them."""
