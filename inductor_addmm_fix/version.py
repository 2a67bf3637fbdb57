"""The package version (read by setuptools and by the cache-key tag)."""

__version__ = "0.1.0"
