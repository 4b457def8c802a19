"""AllenNLP's ELMo API, on this library: migrating is one import line.

Code written for AllenNLP (``from allennlp.modules.elmo import Elmo, batch_to_ids`` and
``from allennlp.commands.elmo import ElmoEmbedder``) runs unchanged with::

    from elmo.allennlp import Elmo, batch_to_ids, ElmoEmbedder

The names, arguments, return types and numbers are AllenNLP's (its last release, 2.10), its
statefulness included: by default the LSTM state of each batch row carries over to the same row
of the next batch, as AllenNLP's ``_ElmoBiLm`` did, so old results reproduce. ``state="warm"``
(or ``"reset"``) switches to this library's deterministic policies, where a sentence's vectors
never depend on what was embedded before it (see ``docs/state.md`` and ``docs/from-allennlp.md``).

The published models' URLs (AllenNLP's defaults) resolve through this library's download cache;
local paths load directly (both through :func:`elmo.hub.load_model`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from typing import IO, Any

import numpy as np
import torch
from torch import nn

from elmo.hub.resolve import load_model
from elmo.inference.embed import Embedder
from elmo.inference.runtime import Runtime
from elmo.model.bilm import BiLM, remove_boundaries
from elmo.model.chars import batch_to_char_ids
from elmo.model.dropout import Dropout
from elmo.model.scalar_mix import ScalarMix

# AllenNLP's defaults for ElmoEmbedder: the original model.
DEFAULT_OPTIONS_FILE = ("https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/"
                        "elmo_2x4096_512_2048cnn_2xhighway_options.json")
DEFAULT_WEIGHT_FILE = ("https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/"
                       "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5")
# AllenNLP's own defaults (allennlp.commands.elmo.DEFAULT_BATCH_SIZE, and its stateful _ElmoBiLm),
# part of the API this module reproduces: they stay AllenNLP's whatever this library's own
# defaults (elmo.inference.embed.DEFAULT_BATCH_SIZE, elmo.inference.states.DEFAULT_STATE) become.
DEFAULT_BATCH_SIZE = 64
ALLENNLP_STATE = "stateful"

logger = logging.getLogger(__name__)


def batch_to_ids(batch: list[list[str]]) -> torch.Tensor:
    """Character ids ``(batch, max_len, 50)`` of tokenized sentences, 0 at padding: the input of
    :class:`Elmo`, exactly as AllenNLP's ``batch_to_ids`` made it."""
    if isinstance(batch, str) or any(isinstance(s, str) for s in batch):
        raise TypeError("batch_to_ids: expected a list of token lists, e.g. [['Hello', 'world']]")
    return batch_to_char_ids(batch)[0]


def load_bilm(options_file: str | os.PathLike, weight_file: str | os.PathLike) -> BiLM:
    """The biLM of an ``options_file`` + ``weight_file`` pair as AllenNLP took them: local paths,
    or the URLs of the published models (fetched once into the download cache)."""
    return load_model((options_file, weight_file))


def _refuse(name: str, value: Any, default: Any, instead: str) -> None:
    if value is not default and value != default:
        raise ValueError(f"{name}: not supported by elmo.allennlp; {instead}")


class Elmo(nn.Module):
    """AllenNLP's ``Elmo``: a frozen (or, with ``requires_grad``, trainable) biLM and
    ``num_output_representations`` scalar mixes, each followed by dropout.

    ``forward(inputs, word_inputs=None)`` takes character ids ``(batch, timesteps, 50)`` from
    :func:`batch_to_ids` (extra leading dimensions are flattened and restored), or word ids
    ``(batch, timesteps)`` into ``vocab_to_cache``, and returns ``{"elmo_representations": [...],
    "mask": ...}``: one ``(batch, timesteps, dim)`` tensor per mix and the ``(batch, timesteps)``
    mask, with the sentence boundaries removed unless ``keep_sentence_boundaries``.

    ``state``: ``"stateful"`` (AllenNLP's behaviour, the default), ``"warm"`` or ``"reset"``.
    """

    def __init__(self, options_file: str | os.PathLike, weight_file: str | os.PathLike,
                 num_output_representations: int, requires_grad: bool = False, do_layer_norm: bool = False,
                 dropout: float = 0.5, vocab_to_cache: list[str] | None = None,
                 keep_sentence_boundaries: bool = False, scalar_mix_parameters: list[float] | None = None,
                 module: nn.Module | None = None, *, state: str = ALLENNLP_STATE):
        super().__init__()
        _refuse("module", module, None, "pass options_file and weight_file (a biLM object: elmo.Elmo(bilm=...))")
        if num_output_representations < 1:
            raise ValueError(f"num_output_representations: must be at least 1, got {num_output_representations}")
        self._elmo_lstm = load_bilm(options_file, weight_file)
        self.requires_grad = requires_grad
        for p in self._elmo_lstm.parameters():
            p.requires_grad_(requires_grad)
        self._keep_sentence_boundaries = keep_sentence_boundaries
        n_layers = self._elmo_lstm.config.n_output_layers
        if scalar_mix_parameters is not None and len(scalar_mix_parameters) != n_layers:
            raise ValueError(f"scalar_mix_parameters: {len(scalar_mix_parameters)} values for a biLM with "
                             f"{n_layers} layers")
        self._dropout = Dropout(dropout)
        self._scalar_mixes = nn.ModuleList()
        for k in range(num_output_representations):
            mix = ScalarMix(n_layers, do_layer_norm=do_layer_norm)
            if scalar_mix_parameters is not None:  # fixed weights, as AllenNLP: not trained
                with torch.no_grad():
                    mix.scalars.copy_(torch.tensor(scalar_mix_parameters, dtype=torch.float32))
                mix.scalars.requires_grad_(False)
            self.add_module(f"scalar_mix_{k}", mix)
            self._scalar_mixes.append(mix)
        self._vocab = list(vocab_to_cache) if vocab_to_cache is not None else None
        self._runtime = Runtime(self._elmo_lstm, state=state)
        self.state = state

    def get_output_dim(self) -> int:
        return self._elmo_lstm.output_dim

    def reset_states(self) -> None:
        """Forget the LSTM state carried between batches (stateful mode)."""
        self._runtime.reset_state()

    def _char_ids_of_words(self, word_inputs: torch.Tensor) -> torch.Tensor:
        if self._vocab is None:
            raise ValueError("word_inputs: this Elmo was built without vocab_to_cache; pass character ids")
        rows = []
        for row in word_inputs.tolist():
            words = []
            for index in row:
                if index == 0:  # padding id
                    break
                if not 0 < index < len(self._vocab):
                    raise ValueError(f"word_inputs: id {index} is outside vocab_to_cache ({len(self._vocab)} words)")
                words.append(self._vocab[index])
            rows.append(words)
        ids, _ = batch_to_char_ids(rows)
        if ids.shape[1] < word_inputs.shape[1]:  # keep the caller's timesteps
            ids = nn.functional.pad(ids, (0, 0, 0, word_inputs.shape[1] - ids.shape[1]))
        return ids.to(word_inputs.device)

    def _bilm_layers(self, char_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The biLM's layers ``(batch, L+1, time+2, dim)`` with boundaries and their mask."""
        mask = (char_ids > 0).any(dim=-1)
        if self._runtime.device != next(self._elmo_lstm.parameters()).device:  # the module was moved
            self._runtime = Runtime(self._elmo_lstm, state=self.state)
        # With requires_grad, the biLM's own forward under autograd, so that gradients reach its weights.
        out = self._runtime.step(char_ids, mask, keep_boundaries=True,
                                 differentiable=self.requires_grad and torch.is_grad_enabled())
        return out.layers, out.mask

    def forward(self, inputs: torch.Tensor, word_inputs: torch.Tensor | None = None) -> dict[str, Any]:
        if word_inputs is not None:
            shape = word_inputs.shape
            char_ids = self._char_ids_of_words(word_inputs.reshape(-1, shape[-1]))
        else:
            if inputs is None or inputs.shape[-1] != 50:
                raise ValueError("inputs: expected character ids (batch, timesteps, 50) from batch_to_ids")
            shape = inputs.shape[:-1]
            char_ids = inputs.reshape(-1, inputs.shape[-2], inputs.shape[-1])
        layers, mask = self._bilm_layers(char_ids)
        # As AllenNLP: each mix sees the layers with the boundaries (its layer norm counts them),
        # which are removed afterwards.
        mixed = [mix(layers, mask) for mix in self._scalar_mixes]
        if not self._keep_sentence_boundaries:
            stacked, mask = remove_boundaries(torch.stack(mixed, dim=1), mask)
            mixed = list(stacked.unbind(dim=1))
        representations = [self._dropout(m) for m in mixed]
        if len(shape) > 2:  # (batch, n, timesteps) inputs: give the leading dimensions back
            time = mask.shape[-1]
            representations = [r.view(*shape[:-1], time, -1) for r in representations]
            mask = mask.view(*shape[:-1], time)
        return {"elmo_representations": representations, "mask": mask}


class ElmoEmbedder:
    """AllenNLP's ``ElmoEmbedder``: numpy arrays ``(3, n_tokens, 1024)`` (for the original model)
    per sentence, stateful by default as AllenNLP's was.

    ``cuda_device``: -1 for the CPU, else the GPU's index. ``state`` switches to this library's
    deterministic ``"warm"`` (or ``"reset"``) policy.
    """

    def __init__(self, options_file: str | os.PathLike = DEFAULT_OPTIONS_FILE,
                 weight_file: str | os.PathLike = DEFAULT_WEIGHT_FILE, cuda_device: int = -1, *,
                 state: str = ALLENNLP_STATE):
        if not isinstance(cuda_device, int):
            raise ValueError(f"cuda_device: expected -1 (CPU) or a GPU index, got {cuda_device!r}")
        device = "cpu" if cuda_device < 0 else f"cuda:{cuda_device}"
        self.cuda_device = cuda_device
        # Batches stay exactly as the caller forms them (AllenNLP's order), never re-sorted.
        self.embedder = Embedder(load_bilm(options_file, weight_file), state=state, device=device,
                                 batch_size=DEFAULT_BATCH_SIZE)

    def batch_to_embeddings(self, batch: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(activations (batch, 3, timesteps, dim), mask (batch, timesteps))`` of one batch."""
        out = self.embedder.runtime.run_batch(batch)
        return out.layers, out.mask

    def embed_sentence(self, sentence: list[str]) -> np.ndarray:
        """One tokenized sentence: ``(3, n_tokens, dim)``."""
        return self.embed_batch([sentence])[0]

    def embed_batch(self, batch: list[list[str]]) -> list[np.ndarray]:
        """A batch of tokenized sentences, as one biLM batch: a ``(3, n_i, dim)`` array each."""
        if batch == [[]]:
            return [np.zeros((self.embedder.model.config.n_output_layers, 0, self.embedder.model.output_dim),
                             dtype=np.float32)]
        return self.embedder.embed_batch(batch)

    def embed_sentences(self, sentences: Iterable[list[str]], batch_size: int = DEFAULT_BATCH_SIZE
                        ) -> Iterator[np.ndarray]:
        """Lazily embed sentences in batches of ``batch_size`` in input order (a generator, as
        AllenNLP's)."""
        if batch_size < 1:
            raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
        batch: list[list[str]] = []
        for sentence in sentences:
            batch.append(sentence)
            if len(batch) == batch_size:
                yield from self.embed_batch(batch)
                batch = []
        if batch:
            yield from self.embed_batch(batch)

    def embed_file(self, input_file: IO, output_file_path: str, output_format: str = "all",
                   batch_size: int = DEFAULT_BATCH_SIZE, forget_sentences: bool = False,
                   use_sentence_keys: bool = False) -> None:
        """Embed an open file of sentences (one per line, tokens split on whitespace) into HDF5:
        one dataset per line (``"0"``, ``"1"``, ..., or the line itself with
        ``use_sentence_keys``) of shape ``(3, n, dim)`` (``"all"``) or ``(n, dim)`` (``"top"``,
        ``"average"``), plus ``sentence_to_index`` unless ``forget_sentences``: the layout of
        ``elmo embed`` and of AllenNLP's ``allennlp elmo``. Written atomically."""
        import h5py

        from elmo.fileio import atomic_path
        from elmo.inference.embed import select_layers

        if output_format not in ("all", "top", "average"):
            raise ValueError(f"output_format: expected 'all', 'top' or 'average', got {output_format!r}")
        sentences = [line.strip() for line in input_file]
        blank = [i for i, s in enumerate(sentences) if not s]
        if blank:  # AllenNLP refused these too: an empty line has nothing to embed
            raise ValueError(f"{getattr(input_file, 'name', 'input')}:{blank[0] + 1}: empty line; remove blank lines")
        keys = sentences if use_sentence_keys else [str(i) for i in range(len(sentences))]
        if use_sentence_keys and len(set(keys)) != len(keys):
            raise ValueError("use_sentence_keys: the input repeats a sentence, and keys must be unique")
        with atomic_path(output_file_path) as tmp, h5py.File(tmp, "w") as fout:
            vectors = self.embed_sentences((s.split() for s in sentences), batch_size)
            for key, array in zip(keys, vectors):
                fout.create_dataset(key, data=select_layers(array, output_format).astype(np.float32))
            if not forget_sentences:
                dataset = fout.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
                dataset[0] = json.dumps(dict(zip(sentences, keys)))


__all__ = ["DEFAULT_OPTIONS_FILE", "DEFAULT_WEIGHT_FILE", "Elmo", "ElmoEmbedder", "batch_to_ids", "load_bilm"]
