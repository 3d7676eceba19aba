"""Machinery for the tests: the strict CuPy stand-in and the host-sync guard
(:mod:`minitransformer.testing.strict`). Not part of the reading path."""
