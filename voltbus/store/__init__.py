"""The store client: Agent Lightning's LightningStore API over voltbus's event log.

A façade: the implementation, and the list of public names (``__all__``), is ``voltbus.services.clients.store``.
"""

from __future__ import annotations

from voltbus.services.clients.store import *  # noqa: F403 - the façade re-exports the client's public names
from voltbus.services.clients.store import __all__  # noqa: F401
