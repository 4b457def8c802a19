"""ELMo: deep contextualized word representations (Peters et al. 2018).

Public API::

    from elmo import Embedder, Elmo, BiLM, BiLMConfig, ScalarMix, batch_to_char_ids, load_model
    from elmo import FileEmbedder, open_embeddings  # write / read what elmo embed writes
"""

from elmo.hub.checkpoints import load_checkpoint, save_checkpoint
from elmo.hub.resolve import load_model
from elmo.inference.elmo import Elmo, ElmoOutput
from elmo.inference.embed import Embedder
from elmo.inference.embed_file import EmbedReport, FileEmbedder
from elmo.inference.outputs import Embeddings, open_embeddings
from elmo.inference.states import DEFAULT_STATE, STATE_MODES
from elmo.model.bilm import BiLM, BiLMOutput, BiLMState
from elmo.model.chars import batch_to_char_ids, tokenize
from elmo.model.config import BiLMConfig, CharCNNConfig, ConfigError, LSTMConfig
from elmo.model.dictionary import CharacterDictionary
from elmo.model.scalar_mix import ScalarMix
from elmo.model.weights import WeightsError, load_bilm_tf, save_bilm_tf
from elmo.version import __version__ as __version__

__all__ = [
    "BiLM", "BiLMConfig", "BiLMOutput", "BiLMState", "CharCNNConfig", "CharacterDictionary", "ConfigError",
    "DEFAULT_STATE", "Elmo", "ElmoOutput", "EmbedReport", "Embedder", "Embeddings", "FileEmbedder", "LSTMConfig", "STATE_MODES",
    "ScalarMix", "WeightsError", "batch_to_char_ids", "load_bilm_tf", "load_checkpoint", "load_model",
    "open_embeddings", "save_bilm_tf", "save_checkpoint", "tokenize",
]
