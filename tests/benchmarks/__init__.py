"""Benchmarks (R29): run on demand with ``pytest -m bench tests/benchmarks`` or as scripts."""
