"""``voltbus store-server``: Agent Lightning 0.3's HTTP store API and OTLP/HTTP trace ingest, over the event log."""
