"""``install_as_allennlp()``: make ``import allennlp.modules.elmo``,
``allennlp.modules.token_embedders``, ``allennlp.modules.scalar_mix`` and ``allennlp.commands.elmo``
give this library's drop-in, for code that cannot be edited (a library that imports AllenNLP
inside), as PyMySQL's ``install_as_MySQLdb()`` does for MySQLdb.

Only those modules exist under the name: ``allennlp``, ``allennlp.modules`` and
``allennlp.commands`` are empty packages holding them, and any other ``allennlp.*`` import fails
with a message saying what is provided. A real AllenNLP, installed or imported, is never
shadowed: the call refuses instead.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

# The modules AllenNLP code imports, and ours that stand in for them.
PROVIDED = {"allennlp.modules.elmo": "elmo.allennlp.modules", "allennlp.commands.elmo": "elmo.allennlp.commands",
            "allennlp.modules.scalar_mix": "elmo.allennlp.scalar_mix",
            "allennlp.modules.token_embedders": "elmo.allennlp.token_embedders",
            "allennlp.modules.token_embedders.elmo_token_embedder": "elmo.allennlp.token_embedders"}
PACKAGES = ("allennlp", "allennlp.modules", "allennlp.commands")
MARKER = "__elmo_drop_in__"  # set on the stand-in packages: tells ours from a real AllenNLP
WHAT_IS_PROVIDED = ("elmo's AllenNLP drop-in (installed by elmo.allennlp.install_as_allennlp()) provides only "
                    "allennlp.modules.elmo (Elmo, batch_to_ids, _ElmoBiLm, _ElmoCharacterEncoder), "
                    "allennlp.modules.token_embedders (ElmoTokenEmbedder), allennlp.modules.scalar_mix (ScalarMix) "
                    "and allennlp.commands.elmo (ElmoEmbedder, DEFAULT_OPTIONS_FILE, DEFAULT_WEIGHT_FILE)")


class _RestOfAllenNLP(importlib.abc.MetaPathFinder):
    """Answers every ``allennlp.*`` import that is not provided with a clear error (instead of
    the bare "No module named" of an empty package)."""

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname.startswith("allennlp.") and fullname not in PROVIDED and fullname not in PACKAGES:
            # No ``name=``: Python drops an error that names the module it tried for
            # ``from allennlp.modules import X`` and says only "cannot import name", losing this message.
            raise ModuleNotFoundError(f"No module named {fullname!r}: {WHAT_IS_PROVIDED}")
        return None


def _package(name: str) -> types.ModuleType:
    """An empty package ``name`` whose unknown attributes fail with :data:`WHAT_IS_PROVIDED`."""
    package = types.ModuleType(name, f"Stand-in for AllenNLP's {name}: {WHAT_IS_PROVIDED}.")
    package.__path__ = []
    package.__package__ = name
    package.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    setattr(package, MARKER, True)

    def __getattr__(attribute: str):
        raise AttributeError(f"module {name!r} has no attribute {attribute!r}: {WHAT_IS_PROVIDED}")

    package.__getattr__ = __getattr__  # PEP 562: consulted only for missing attributes
    return package


def _real_allennlp() -> str | None:
    """Where a real AllenNLP is (imported or installed), or None."""
    imported = sys.modules.get("allennlp")
    if imported is not None:
        if getattr(imported, MARKER, False):
            return None
        return f"imported from {getattr(imported, '__file__', None) or imported!r}"
    spec = importlib.util.find_spec("allennlp")
    if spec is None:
        return None
    where = spec.origin if spec.origin not in (None, "namespace") else list(spec.submodule_search_locations or [])
    return f"installed at {where}"


def install_as_allennlp() -> None:
    """Make ``allennlp.modules.elmo``, ``allennlp.modules.token_embedders`` (and its
    ``elmo_token_embedder``), ``allennlp.modules.scalar_mix`` and ``allennlp.commands.elmo`` this
    library's :mod:`elmo.allennlp.modules`, :mod:`elmo.allennlp.token_embedders`,
    :mod:`elmo.allennlp.scalar_mix` and :mod:`elmo.allennlp.commands`, so that code importing them
    (``from allennlp.modules.elmo import Elmo, batch_to_ids``, ``from
    allennlp.modules.token_embedders import ElmoTokenEmbedder``, ``from allennlp.commands.elmo
    import ElmoEmbedder``) runs unchanged. Call it before that
    code is imported. Calling it again does nothing.

    Raises RuntimeError if a real AllenNLP is installed or already imported: it is never
    shadowed (use it, or uninstall it to use this drop-in)."""
    real = _real_allennlp()
    if real is not None:
        raise RuntimeError(f"install_as_allennlp: a real allennlp is {real}; refusing to shadow it. Use it as it "
                           "is, or uninstall it (pip uninstall allennlp) to run this code on elmo's drop-in")
    if "allennlp" in sys.modules:  # installed already
        return
    modules = {name: importlib.import_module(ours) for name, ours in PROVIDED.items()}
    packages = {name: _package(name) for name in PACKAGES}
    packages["allennlp"].modules = packages["allennlp.modules"]
    packages["allennlp"].commands = packages["allennlp.commands"]
    packages["allennlp.modules"].elmo = modules["allennlp.modules.elmo"]
    packages["allennlp.modules"].scalar_mix = modules["allennlp.modules.scalar_mix"]
    packages["allennlp.modules"].token_embedders = modules["allennlp.modules.token_embedders"]
    packages["allennlp.commands"].elmo = modules["allennlp.commands.elmo"]
    if not any(isinstance(finder, _RestOfAllenNLP) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RestOfAllenNLP())
    sys.modules.update(modules)
    sys.modules.update(packages)


__all__ = ["install_as_allennlp"]
