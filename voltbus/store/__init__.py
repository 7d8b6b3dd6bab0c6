"""The store client: Agent Lightning's LightningStore API over voltbus's event log. A façade: the implementation and
its public names are ``voltbus.services.clients.store``; AL's store classes (``LightningStore``,
``InMemoryLightningStore``, ``LightningStoreClient``) are in ``lightning.py``."""

from __future__ import annotations

from voltbus.services.clients.store import *  # noqa: F403 - the façade re-exports the client's public names
from voltbus.services.clients.store import __all__ as _client_names

from .lightning import InMemoryLightningStore as InMemoryLightningStore
from .lightning import LightningStore as LightningStore
from .lightning import LightningStoreClient as LightningStoreClient

__all__ = sorted([*_client_names, "InMemoryLightningStore", "LightningStore", "LightningStoreClient"])
