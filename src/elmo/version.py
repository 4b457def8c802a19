"""The package's version and distribution name: a leaf, so that any module can record the version
(a resumable run's fingerprint does) or name the distribution in an install hint without importing
the package's public API."""

__version__ = "0.1.0"

# The name on PyPI. The import name stays ``elmo``; the name ``elmo`` on PyPI belongs to an unrelated
# project, so every install hint names this one.
DISTRIBUTION = "elmo-embeddings"


def install_hint(extra: str) -> str:
    """The command that installs the optional extra ``extra`` (``"serve"``, ``"hub,serve"``), for
    error messages: ``pip install 'elmo-embeddings[serve]'``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"
