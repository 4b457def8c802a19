"""Protein ELMos: a SeqVec-shaped model (its published options.json, random weights) embeds
amino-acid sequences given as one-character tokens, through Embedder and AllenNLP's API."""

import json

import numpy as np
import pytest
import torch
from conftest import FIXTURES

from elmo import BiLM, BiLMConfig, Embedder, save_bilm_tf
from elmo.allennlp import ElmoEmbedder
from elmo.hub import load_model

SEQVEC_OPTIONS = FIXTURES / "seqvec" / "options.json"
AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWYXUBZO"  # the 20, the unknown X and the rare or ambiguous ones


def seqvec_shaped(scale: int) -> BiLMConfig:
    """SeqVec's published options with every width divided by ``scale`` (1: the shape itself):
    the same filter widths, highway layers, clipping, residual and character scheme."""
    options = json.loads(SEQVEC_OPTIONS.read_text())
    cnn, lstm = options["char_cnn"], options["lstm"]
    cnn["filters"] = [[width, max(1, n // scale)] for width, n in cnn["filters"]]
    cnn["embedding"]["dim"] = max(4, cnn["embedding"]["dim"] // scale)
    lstm["dim"] //= scale
    lstm["projection_dim"] //= scale
    return BiLMConfig.from_dict(options)


def random_protein_model(tmp_path, scale: int):
    """A random-weight model of that shape saved as SeqVec ships: options.json + weights.hdf5."""
    torch.manual_seed(7)
    model = BiLM(seqvec_shaped(scale)).eval()
    return save_bilm_tf(model, tmp_path / f"seqvec-{scale}")


def sequence(n: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    return "".join(rng.choice(list(AMINO_ACIDS[:21]), size=n))


def test_published_shape_is_seqvecs():
    config = seqvec_shaped(1)
    assert config.lstm.dim == 4096 and config.lstm.projection_dim == 512 and config.char_cnn.n_filters == 2048
    assert config.parameter_count() == 93_600_864  # as the original ELMo: SeqVec is its architecture
    assert config.training["n_tokens_vocab"] == 28


def test_embedder_and_allennlp_api_agree(tmp_path):
    options, weights = random_protein_model(tmp_path, scale=16)
    protein = sequence(300)
    # SeqVec's documented call: AllenNLP's ElmoEmbedder, one token per residue.
    seqvec = ElmoEmbedder(options, weights)
    vectors = seqvec.embed_sentence(list(protein))
    assert vectors.shape == (3, 300, 64)
    # Its first call starts from zero state, as Embedder's "reset" policy does.
    embedder = Embedder(load_model((options, weights)), state="reset")
    np.testing.assert_allclose(embedder.embed_sentence(list(protein)), vectors, rtol=0, atol=1e-5)
    # A residue is a one-character token: the same letter gets the same layer-0 vector anywhere.
    first_a = protein.index("A")
    second_a = protein.index("A", first_a + 1)
    np.testing.assert_array_equal(vectors[0, first_a], vectors[0, second_a])


def test_long_sequences_match_the_reference_path(tmp_path):
    """A sequence of 1,200 residues (10 of the fast path's 128-step gate chunks) gives the
    per-timestep reference's numbers; time and memory on 5,000 were measured by
    benchmarks/protein_long.py (commit 4dffab8; docs/other-models.md)."""
    options, weights = random_protein_model(tmp_path, scale=32)
    model = load_model((options, weights))
    protein = list(sequence(1200, seed=1))
    fast = Embedder(model, state="reset").embed_sentence(protein)
    model.fast = False
    reference = Embedder(model, state="reset").embed_sentence(protein)
    assert fast.shape == (3, 1200, 32)
    np.testing.assert_allclose(fast, reference, rtol=0, atol=2e-5)


@pytest.mark.slow
def test_full_size_seqvec_shape(tmp_path):
    options, weights = random_protein_model(tmp_path, scale=1)
    protein = sequence(120, seed=2)
    vectors = ElmoEmbedder(options, weights).embed_sentence(list(protein))
    assert vectors.shape == (3, 120, 1024) and np.isfinite(vectors).all()
    reset = Embedder.from_files(options, weights, state="reset").embed_sentence(list(protein))
    np.testing.assert_allclose(reset, vectors, rtol=0, atol=1e-4)
