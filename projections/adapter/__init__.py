"""Training data from traces: pure functions from one attempt's spans, model calls and rewards to
triplet and trajectory rows (Agent Lightning's adapters, made deterministic and auditable)."""

from .adapt import adapt
from .inputs import AttemptInput, CallRow, RewardRow, SpanRow
from .outputs import AdapterOutput, AttemptSummary, TrajectoryRow, TripletRow
from .settings import ADAPTER_VERSION, AdapterSettings, parse_settings, settings_id

__all__ = [
    "ADAPTER_VERSION",
    "AdapterOutput",
    "AdapterSettings",
    "AttemptInput",
    "AttemptSummary",
    "CallRow",
    "RewardRow",
    "SpanRow",
    "TrajectoryRow",
    "TripletRow",
    "adapt",
    "parse_settings",
    "settings_id",
]
