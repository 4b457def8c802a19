"""AllenNLP's ELMo API, on this library: migrating is one import line, or one call.

Code written for AllenNLP (``from allennlp.modules.elmo import Elmo, batch_to_ids``, ``from
allennlp.modules.token_embedders import ElmoTokenEmbedder`` and ``from allennlp.commands.elmo
import ElmoEmbedder``) runs unchanged with::

    from elmo.allennlp import Elmo, batch_to_ids, ElmoEmbedder, ElmoTokenEmbedder

and code that cannot be edited (a library that imports AllenNLP inside, such as flair's
``ELMoEmbeddings`` or SeqVec) runs unchanged after :func:`install_as_allennlp`, which makes
``allennlp.modules.elmo``, ``allennlp.modules.token_embedders``, ``allennlp.modules.scalar_mix``
and ``allennlp.commands.elmo`` these modules.

The names, arguments, return types and numbers are AllenNLP's (``modules`` of its last release,
2.10; ``commands.elmo`` of 0.9, the last with ``ElmoEmbedder``), its ``state_dict`` keys and
shapes (a model saved with AllenNLP's ``Elmo`` inside loads with ``strict=True``), its statefulness
included: by default the LSTM state of each batch row carries over to the same row of the next
batch, as AllenNLP's ``_ElmoBiLm`` did, so old results reproduce. ``state="warm"`` (or
``"reset"``) switches to this library's deterministic policies, where a sentence's vectors never
depend on what was embedded before it (``docs/state.md``, ``docs/from-allennlp.md``).
``python -m elmo.allennlp elmo ...`` is AllenNLP's ``allennlp elmo`` command.

Model URLs (AllenNLP's defaults, contributed models' URLs, any other) resolve through this
library's download cache, and ``hf://`` ids through the Hugging Face Hub's; local paths load
directly (all through :func:`elmo.hub.load_model`).
"""

from elmo.allennlp.commands import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_OPTIONS_FILE,
    DEFAULT_WEIGHT_FILE,
    ElmoEmbedder,
)
from elmo.allennlp.install import install_as_allennlp
from elmo.allennlp.modules import (
    Elmo,
    _ElmoBiLm,
    _ElmoCharacterEncoder,
    batch_to_ids,
    load_bilm,
)
from elmo.allennlp.scalar_mix import ScalarMix
from elmo.allennlp.token_embedders import ElmoTokenEmbedder

__all__ = ["DEFAULT_BATCH_SIZE", "DEFAULT_OPTIONS_FILE", "DEFAULT_WEIGHT_FILE", "Elmo", "ElmoEmbedder",
           "ElmoTokenEmbedder", "ScalarMix", "_ElmoBiLm", "_ElmoCharacterEncoder", "batch_to_ids",
           "install_as_allennlp", "load_bilm"]
