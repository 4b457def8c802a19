"""The package's version: a leaf, so that any module can record it (a resumable run's
fingerprint does) without importing the package's public API."""

__version__ = "0.1.0"
