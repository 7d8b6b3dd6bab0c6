"""The errors a store query raises (docs/store-queries.md); the queries are ``voltbus.services.clients.store``'s."""

from voltbus.services.clients.store.queries import InvalidCommand, ProjectorUnavailable

__all__ = ["InvalidCommand", "ProjectorUnavailable"]
