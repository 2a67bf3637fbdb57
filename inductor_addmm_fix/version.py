"""The package version (read by setuptools and by the cache-key tag).

The version of the last CHANGELOG release on the commit that cuts it, then the next
release's with ``.devN`` until the next one (README, "Versions"; tests/test_docs.py)."""

__version__ = "0.3.0.dev0"
