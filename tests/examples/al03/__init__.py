"""Agent Lightning 0.3's example agents as their users have them (only the import changed), for tests/examples."""
