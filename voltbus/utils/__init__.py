"""Agent Lightning's ``utils`` package: only ``utils.otel``'s attribute helpers are carried over."""
