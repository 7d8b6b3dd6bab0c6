"""A tiny CPU language model: character tokenizer, Llama model, warm start and logprob recomputation.

Needs torch and transformers (``pip install 'voltbus[learn]'``); ``import voltbus`` never loads them. A
façade: the implementation, and the list of public names (``__all__``), is ``voltbus.services.clients.model``.
"""

from __future__ import annotations

from voltbus.services.clients.model import *  # noqa: F403 - the façade re-exports the model's public names
from voltbus.services.clients.model import __all__  # noqa: F401
