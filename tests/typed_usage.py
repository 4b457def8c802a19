"""User code of the public API, for ``mypy --strict`` (tests/test_typing.py): every name
``elmo`` and ``elmo.allennlp`` export, used as the docs show, with the types a user's code would
declare. It is type-checked, not run (``reveal_type``-free, no model is loaded when imported).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

import elmo
import elmo.allennlp
from elmo import (
    DEFAULT_STATE,
    STATE_MODES,
    BiLM,
    BiLMConfig,
    BiLMOutput,
    BiLMState,
    CharacterDictionary,
    CharCNNConfig,
    ConfigError,
    Elmo,
    ElmoOutput,
    EmbedReport,
    Embedder,
    Embeddings,
    FileEmbedder,
    LSTMConfig,
    ScalarMix,
    WeightsError,
    batch_to_char_ids,
    load_model,
    open_embeddings,
    save_bilm_tf,
    save_checkpoint,
    tokenize,
)


def embed(folder: Path) -> float:
    embedder: Embedder = Embedder(state=DEFAULT_STATE, batch_size=16)
    other: Embedder = Embedder.from_pretrained("default", progress=False)
    also: Embedder = Embedder.from_files(folder / "options.json", folder / "weights.hdf5")
    vectors: list[np.ndarray] = embedder.embed(["The bank raised rates .", ["We", "sat", "."]], layers="top")
    one: np.ndarray = embedder.embed_sentence(tokenize("The bank raised rates ."))
    assert other.state in STATE_MODES and also.batch_size > 0
    report: EmbedReport = FileEmbedder(embedder).write(folder / "in.txt", folder / "out.hdf5", overwrite=True)
    assert report is not None
    stored: Embeddings = open_embeddings(folder / "out.hdf5")
    first: npt.NDArray[np.floating] = stored[0]
    stored.close()
    return float(vectors[0].sum() + one.sum() + first.sum())


def task(folder: Path) -> torch.Tensor:
    bilm: BiLM = load_model("default")
    config: BiLMConfig = bilm.config
    assert isinstance(config.char_cnn, CharCNNConfig) and isinstance(config.lstm, LSTMConfig)
    char_ids, mask = batch_to_char_ids([["The", "cat", "sat", "."]])
    out: BiLMOutput = bilm(char_ids, mask)
    state: BiLMState | None = out.state
    assert state is None or state.batch_size == 1
    mixer = Elmo(bilm, num_output_representations=2, l2_coef=0.001)
    result: ElmoOutput = mixer.embed([["The", "cat", "sat", "."]])
    mix = ScalarMix(bilm.config.n_output_layers)
    mixed: torch.Tensor = mix(out.layers, out.mask)
    save_checkpoint(bilm, folder / "model.pt")
    written: tuple[str, str] = save_bilm_tf(bilm, folder / "exported")
    assert all(written)
    assert isinstance(CharacterDictionary, type) and issubclass(ConfigError, Exception)
    assert issubclass(WeightsError, Exception)
    loss: torch.Tensor = result.representations[0].sum() + mixed.sum() + mixer.l2_penalty()
    return loss


def allennlp(folder: Path) -> torch.Tensor:
    options, weights = folder / "options.json", folder / "weights.hdf5"
    ids: torch.Tensor = elmo.allennlp.batch_to_ids([["The", "cat", "."]])
    module = elmo.allennlp.Elmo(options, weights, 2, dropout=0.0)
    output = module(ids)
    representations: list[torch.Tensor] = output["elmo_representations"]
    embedder = elmo.allennlp.ElmoEmbedder(str(options), str(weights))
    vectors: np.ndarray = embedder.embed_sentence(["The", "cat", "."])
    token_embedder = elmo.allennlp.ElmoTokenEmbedder(str(options), str(weights))
    embedded: torch.Tensor = token_embedder(ids)
    bilm = elmo.allennlp._ElmoBiLm(options, weights)
    chars = elmo.allennlp._ElmoCharacterEncoder(options, weights)
    width: int = bilm.get_output_dim() + chars.get_output_dim() + module.get_output_dim()
    loaded: BiLM = elmo.allennlp.load_bilm(options, weights)
    mix = elmo.allennlp.ScalarMix(3)
    elmo.allennlp.install_as_allennlp()
    size: int = elmo.allennlp.DEFAULT_BATCH_SIZE
    names: tuple[str, str] = (elmo.allennlp.DEFAULT_OPTIONS_FILE, elmo.allennlp.DEFAULT_WEIGHT_FILE)
    assert names and loaded.n_layers and mix is not None
    return representations[0].sum() + embedded.sum() + float(vectors.sum()) + width + size
