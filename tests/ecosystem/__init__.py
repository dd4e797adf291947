"""Tests of torch-tpu with the libraries people train with (a package, so that
its conftest does not shadow tests/conftest.py, which other tests import)."""
