"""The dashboard: a live web page over the projections, read through the projector's ``/sql``."""
