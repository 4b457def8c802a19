"""AllenNLP's ELMo API, on this library: migrating is one import line, or one call.

Code written for AllenNLP (``from allennlp.modules.elmo import Elmo, batch_to_ids`` and
``from allennlp.commands.elmo import ElmoEmbedder``) runs unchanged with::

    from elmo.allennlp import Elmo, batch_to_ids, ElmoEmbedder

and code that cannot be edited (a library that imports AllenNLP inside, such as flair's
``ELMoEmbeddings`` or SeqVec) runs unchanged after :func:`install_as_allennlp`, which makes
``allennlp.modules.elmo`` and ``allennlp.commands.elmo`` these modules.

The names, arguments, return types and numbers are AllenNLP's (``modules.elmo`` of its last
release, 2.10; ``commands.elmo`` of 0.9, the last with ``ElmoEmbedder``), its statefulness
included: by default the LSTM state of each batch row carries over to the same row of the next
batch, as AllenNLP's ``_ElmoBiLm`` did, so old results reproduce. ``state="warm"`` (or
``"reset"``) switches to this library's deterministic policies, where a sentence's vectors never
depend on what was embedded before it (``docs/state.md``, ``docs/from-allennlp.md``).
``python -m elmo.allennlp elmo ...`` is AllenNLP's ``allennlp elmo`` command.

The published models' URLs (AllenNLP's defaults) resolve through this library's download cache;
local paths load directly (both through :func:`elmo.hub.load_model`).
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

__all__ = ["DEFAULT_BATCH_SIZE", "DEFAULT_OPTIONS_FILE", "DEFAULT_WEIGHT_FILE", "Elmo", "ElmoEmbedder",
           "_ElmoBiLm", "_ElmoCharacterEncoder", "batch_to_ids", "install_as_allennlp", "load_bilm"]
