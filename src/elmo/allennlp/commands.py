"""AllenNLP's ``allennlp.commands.elmo`` (0.9, the last release with it), on this library:
``ElmoEmbedder`` and the defaults of the ``allennlp elmo`` command.

``ElmoEmbedder`` is a layer over :class:`~elmo.allennlp.modules._ElmoBiLm` (its ``elmo_bilm``, as
in AllenNLP), stateful as AllenNLP's was: batches run exactly as the caller forms them, in order,
and each row's LSTM state carries over to the same row of the next batch. The command itself is
``python -m elmo.allennlp elmo ...`` (:mod:`elmo.allennlp.command`).
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Iterable, Iterator
from typing import IO

import numpy as np
import torch

from elmo.allennlp.modules import ALLENNLP_STATE, _ElmoBiLm
from elmo.checks import check_count
from elmo.hub.archives import looks_like_model
from elmo.inference.runtime import resolve_device
from elmo.model.network import remove_boundaries

# AllenNLP's defaults for ElmoEmbedder and the command: the original model.
DEFAULT_OPTIONS_FILE = ("https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/"
                        "elmo_2x4096_512_2048cnn_2xhighway_options.json")
DEFAULT_WEIGHT_FILE = ("https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/"
                       "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5")
DEFAULT_BATCH_SIZE = 64
OUTPUT_FORMATS = ("all", "top", "average")
SHOWN_LINES = 10  # line numbers an error lists before summing up the rest

logger = logging.getLogger(__name__)


class ElmoEmbedder:
    """AllenNLP's ``ElmoEmbedder``: numpy arrays ``(3, n_tokens, 1024)`` (for the original model)
    per sentence, stateful by default as AllenNLP's was.

    ``cuda_device``: -1 for the CPU, else the GPU's index. ``state`` switches to this library's
    deterministic ``"warm"`` (or ``"reset"``) policy. ``options_file`` may also be a whole model
    (an NLPL ``.zip``, an ELMoForManyLangs folder) with ``weight_file`` left out; a protein ELMo
    such as SeqVec embeds ``embed_sentence(list(sequence))``, one token per residue. ``elmo_bilm`` is the
    :class:`~elmo.allennlp.modules._ElmoBiLm` it runs (``elmo_bilm._elmo_lstm.reset_states()``
    forgets the carried state).
    """

    def __init__(self, options_file: str | os.PathLike = DEFAULT_OPTIONS_FILE,
                 weight_file: str | os.PathLike | None = DEFAULT_WEIGHT_FILE, cuda_device: int = -1, *,
                 state: str = ALLENNLP_STATE):
        if isinstance(cuda_device, bool) or not isinstance(cuda_device, int):
            raise ValueError(f"cuda_device: expected -1 (CPU) or a GPU index, got {cuda_device!r}")
        device = resolve_device("cpu" if cuda_device < 0 else f"cuda:{cuda_device}", torch.device("cpu"))
        if weight_file == DEFAULT_WEIGHT_FILE and looks_like_model(options_file):
            weight_file = None  # ElmoEmbedder("model.zip"): the archive alone, not the default weights beside it
        self.elmo_bilm = _ElmoBiLm(options_file, weight_file, state=state, _any_characters=True).eval().to(device)
        self.cuda_device = cuda_device

    def _empty(self) -> np.ndarray:
        """A sentence without tokens: ``(L+1, 0, dim)`` (AllenNLP's was always ``(3, 0, 1024)``)."""
        return np.zeros((self.elmo_bilm.num_layers, 0, self.elmo_bilm.get_output_dim()), dtype=np.float32)

    def batch_to_embeddings(self, batch: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(activations (batch, 3, timesteps, dim), mask (batch, timesteps))`` of one batch."""
        if isinstance(batch, str) or any(isinstance(s, str) for s in batch):
            raise TypeError("batch: expected a list of token lists, e.g. [['Hello', 'world']]")
        rows = [list(sentence) for sentence in batch]
        with torch.no_grad():
            ids, _ = self.elmo_bilm.bilm.characters.batch(rows)  # batch_to_ids for a bilm-tf model
            layers, mask = self.elmo_bilm._layers(ids, words=rows)
        return remove_boundaries(layers, mask)

    def embed_sentence(self, sentence: list[str]) -> np.ndarray:
        """One tokenized sentence: ``(3, n_tokens, dim)``."""
        return self.embed_batch([sentence])[0]

    def embed_batch(self, batch: list[list[str]]) -> list[np.ndarray]:
        """A batch of tokenized sentences, as one biLM batch: a ``(3, n_i, dim)`` array each."""
        if [list(s) for s in batch] == [[]]:  # nothing to run (AllenNLP did not run it either)
            return [self._empty()]
        activations, mask = self.batch_to_embeddings(batch)
        activations = activations.float().cpu().numpy()
        lengths = mask.sum(dim=1).tolist()
        return [activations[i, :, :n] if n else self._empty() for i, n in enumerate(lengths)]

    def embed_sentences(self, sentences: Iterable[list[str]], batch_size: int = DEFAULT_BATCH_SIZE
                        ) -> Iterator[np.ndarray]:
        """Lazily embed sentences in batches of ``batch_size`` in input order (a generator, as
        AllenNLP's)."""
        check_count(batch_size, "batch_size")
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
        """Embed an open file of sentences (one per line, tokens split on whitespace) into HDF5,
        in the layout of AllenNLP's ``allennlp elmo``: one float32 dataset per line, keyed by its
        index (``"0"``, ``"1"``, ...) or, with ``use_sentence_keys``, by the line itself, of shape
        ``(3, n, dim)`` (``"all"``) or ``(n, dim)`` (``"top"``, ``"average"``); plus, unless
        ``forget_sentences`` or ``use_sentence_keys``, ``sentence_to_index``: a JSON object from
        line to key. An input with empty lines is refused, as AllenNLP refused it. The output
        appears only once complete."""
        sentences = [line.strip() for line in input_file]
        self._write_hdf5(sentences, getattr(input_file, "name", "input"), output_file_path, output_format,
                         batch_size, forget_sentences, use_sentence_keys)

    def _write_hdf5(self, sentences: list[str], source: str, output_file_path: str | os.PathLike,
                    output_format: str, batch_size: int, forget_sentences: bool, use_sentence_keys: bool,
                    progress: dict | None = None, checked: bool = False) -> None:
        """:meth:`embed_file` on stripped lines read from ``source`` (named in errors).
        ``progress``: tqdm's arguments for a progress bar (None: no bar); ``checked``: the
        lines already passed :func:`check_lines`."""
        import h5py
        from tqdm import tqdm

        from elmo.fileio import atomic_hdf5, check_output_file

        if output_format not in OUTPUT_FORMATS:
            raise ValueError(f"output_format: expected 'all', 'top' or 'average', got {output_format!r}")
        check_count(batch_size, "batch_size")
        check_output_file(output_file_path, overwrite=True)  # a folder in the way: found before the work
        if not checked:
            check_lines(sentences, source, use_sentence_keys)
        keys = sentences if use_sentence_keys else [str(i) for i in range(len(sentences))]
        vectors = self.embed_sentences((s.split() for s in sentences), batch_size)
        with atomic_hdf5(output_file_path) as fout, \
                tqdm(total=len(sentences), unit="sent", **(progress if progress is not None else {"disable": True})) \
                as bar:
            for number, (key, array) in enumerate(zip(keys, vectors), start=1):
                if output_format == "top":
                    array = array[-1]
                elif output_format == "average":
                    array = np.average(array, axis=0)
                try:
                    fout.create_dataset(key, array.shape, dtype="float32", data=array)
                except ValueError as e:  # a sentence HDF5 cannot take as a name, e.g. "."
                    raise ValueError(f"{source}:{number}: {key!r} cannot be an HDF5 key ({e}); embed without "
                                     "use_sentence_keys (--use-sentence-keys)") from None
                bar.update(1)
            if not forget_sentences and not use_sentence_keys:
                dataset = fout.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
                dataset[0] = json.dumps(dict(zip(sentences, keys)))


def _numbers(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:SHOWN_LINES])
    return shown if len(numbers) <= SHOWN_LINES else f"{shown} and {len(numbers) - SHOWN_LINES} more"


def check_lines(sentences: list[str], source: str, use_sentence_keys: bool) -> None:
    """Refuse what AllenNLP's command refused, before anything is embedded: empty lines and, as
    keys (``use_sentence_keys``), repeated sentences (AllenNLP stopped at the first repeat, with a
    half-written file). A '/' in a key makes h5py store the sentence as nested groups, which
    AllenNLP warned about (``f[sentence]`` still finds it). ``source`` names the input."""
    blank = [i + 1 for i, s in enumerate(sentences) if not s]
    if blank:
        raise ValueError(f"{source}: line{'s' if len(blank) > 1 else ''} {_numbers(blank)} "
                         f"{'are' if len(blank) > 1 else 'is'} empty; remove empty lines (AllenNLP's elmo command "
                         "refused them too)")
    if not use_sentence_keys:
        return
    first: dict[str, int] = {}
    for number, sentence in enumerate(sentences, start=1):
        if sentence in first:
            raise ValueError(f"{source}:{number}: repeats line {first[sentence]}, and with use_sentence_keys "
                             "(--use-sentence-keys) each sentence is a key; to encode duplicate sentences, "
                             "do not use sentences as keys")
        first[sentence] = number
    nested = [number for sentence, number in first.items() if "/" in sentence]
    if nested:
        warnings.warn(f"{source}: line {_numbers(nested)} contain(s) '/', which HDF5 reads as a group separator: "
                      "those sentences are stored as nested groups (h5py's f[sentence] still finds them)",
                      stacklevel=2)


__all__ = ["DEFAULT_BATCH_SIZE", "DEFAULT_OPTIONS_FILE", "DEFAULT_WEIGHT_FILE", "ElmoEmbedder", "check_lines"]
