"""ELMo: deep contextualized word representations (Peters et al. 2018).

Public API::

    from elmo import Embedder, Elmo, BiLM, BiLMConfig, ScalarMix, batch_to_char_ids, load_model
    from elmo import FileEmbedder, open_embeddings  # write / read what elmo embed writes

``load_model`` reads every model source (a name, files in the original layout, a checkpoint, an
exported folder, ...); the readers it goes through stay in their modules:
``elmo.model.weights.load_bilm_tf`` and ``elmo.hub.checkpoints.load_checkpoint``.
"""

import gc as _gc
import sys as _sys
import warnings
from typing import TYPE_CHECKING

from elmo.threads import prepare_openmp as _prepare_openmp
from elmo.version import __version__ as __version__

# Before anything loads PyTorch (and with it OpenMP, which reads its settings once): passive
# waiting, unless the user chose a wait policy (elmo.threads says why).
_prepare_openmp()

# Modules that load no PyTorch: importing them leaves the API unloaded (``elmo --help``).
_LIGHT = frozenset({"elmo.threads", "elmo.checks", "elmo.version", "elmo.cli", "elmo.cli.main"})


class _LoadAPIFirst:
    """A finder that loads the API (under the collector hold of :func:`_load_api`) before the
    first import of any other ``elmo`` module, as ``import elmo`` itself did before it became
    lazy: ``from elmo.inference.embed import Embedder`` pays no collector walks either. It finds
    nothing itself, and leaves ``sys.meta_path`` once the API is loaded."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.startswith("elmo.") and name not in _LIGHT:
            _load_api()
        return None


_sys.meta_path.insert(0, _LoadAPIFirst)


_loading: list = []  # non-empty while (or once) the API loads: its own imports find no finder


def _load_api() -> None:
    """Import the public API (and with it PyTorch) into this module: on the first use of one of
    its names, so that ``import elmo`` alone, ``elmo --help`` and ``elmo --version`` never load
    PyTorch (docs/speed.md, "Start-up"); ``elmo.cli.main`` calls it before a verb's module loads.
    Once loaded, a later call does nothing."""
    if "Embedder" in globals() or _loading:
        return
    _loading.append(True)
    if _LoadAPIFirst in _sys.meta_path:
        _sys.meta_path.remove(_LoadAPIFirst)
    # Importing PyTorch makes about a million objects, none of them garbage, and the cyclic collector
    # would walk them again and again while they are made: 0.2-0.3 s of a one-sentence `elmo embed`
    # (docs/speed.md, "Start-up"). Collection waits until the imports are done, and what they made
    # then joins the oldest generation directly (freeze, then unfreeze), as if it had survived the
    # collections it skipped, instead of being walked by the next young one. A program that froze
    # objects of its own (before forking workers, say) keeps them frozen: then nothing is moved.
    collecting = _gc.isenabled()
    frozen_by_caller = _gc.get_freeze_count() > 0
    _gc.disable()
    try:
        from elmo.hub.checkpoints import save_checkpoint
        from elmo.hub.resolve import load_model
        from elmo.inference.elmo import Elmo, ElmoOutput
        from elmo.inference.embed import Embedder
        from elmo.inference.embed_file import EmbedReport, FileEmbedder
        from elmo.inference.outputs import Embeddings, open_embeddings
        from elmo.inference.states import DEFAULT_STATE, STATE_MODES
        from elmo.model.chars import batch_to_char_ids, tokenize
        from elmo.model.config import BiLMConfig, CharCNNConfig, ConfigError, LSTMConfig
        from elmo.model.dictionary import CharacterDictionary
        from elmo.model.network import BiLM, BiLMOutput, BiLMState, ScalarMix
        from elmo.model.weights import WeightsError, save_bilm_tf
    except BaseException:
        _loading.clear()  # a failed load (a missing dependency) is tried again, and says so again
        raise
    finally:
        if not frozen_by_caller:
            _gc.freeze()
            _gc.unfreeze()
        if collecting:
            _gc.enable()
    names = locals()
    globals().update({name: names[name] for name in __all__})


# What type checkers and editors see; at run time these names load on their first use (above).
if TYPE_CHECKING:
    from elmo.hub.checkpoints import save_checkpoint
    from elmo.hub.resolve import load_model
    from elmo.inference.elmo import Elmo, ElmoOutput
    from elmo.inference.embed import Embedder
    from elmo.inference.embed_file import EmbedReport, FileEmbedder
    from elmo.inference.outputs import Embeddings, open_embeddings
    from elmo.inference.states import DEFAULT_STATE, STATE_MODES
    from elmo.model.chars import batch_to_char_ids, tokenize
    from elmo.model.config import BiLMConfig, CharCNNConfig, ConfigError, LSTMConfig
    from elmo.model.dictionary import CharacterDictionary
    from elmo.model.network import BiLM, BiLMOutput, BiLMState, ScalarMix
    from elmo.model.weights import WeightsError, save_bilm_tf


__all__ = [
    "BiLM", "BiLMConfig", "BiLMOutput", "BiLMState", "CharCNNConfig", "CharacterDictionary", "ConfigError",
    "DEFAULT_STATE", "Elmo", "ElmoOutput", "EmbedReport", "Embedder", "Embeddings", "FileEmbedder", "LSTMConfig",
    "STATE_MODES", "ScalarMix", "WeightsError", "batch_to_char_ids", "load_model", "open_embeddings",
    "save_bilm_tf", "save_checkpoint", "tokenize",
]

# Readers that left the top level for load_model, still found here (with a warning) by code
# written before: name -> the module that holds them.
_MOVED = {"load_bilm_tf": "elmo.model.weights", "load_checkpoint": "elmo.hub.checkpoints"}


def __getattr__(name: str):
    if name in __all__:
        _load_api()
        return globals()[name]
    if name in _MOVED:
        import importlib

        warnings.warn(f"elmo.{name} is no longer part of the top-level API: use elmo.load_model, or import "
                      f"{name} from {_MOVED[name]}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'elmo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
