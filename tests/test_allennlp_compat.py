"""``elmo.allennlp``: AllenNLP's ELMo API with its numbers, checked against the original
implementation's fixtures (the ones the core parity tests use)."""

import json
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest
import torch
from conftest import ALLENNLP, fixture_batches, top_as_fixture

from elmo import BiLM
from elmo.allennlp import (
    DEFAULT_OPTIONS_FILE,
    DEFAULT_WEIGHT_FILE,
    Elmo,
    ElmoEmbedder,
    batch_to_ids,
    load_bilm,
)

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness

OPTIONS, WEIGHTS = str(ALLENNLP / "options.json"), str(ALLENNLP / "lm_weights.hdf5")
# Softmax weights that put everything on the top layer: the fixtures hold the top layer.
TOP_ONLY = [-1e10, -1e10, 0.0]
TOLERANCE = 1e-5


def fixture_flat():
    batches = fixture_batches("allennlp")
    return [s for batch, _ in batches for s in batch], [e for _, exp in batches for e in exp]


def test_batch_to_ids_is_character_ids_with_padding():
    ids = batch_to_ids([["I", "ate"], ["Hi"]])
    assert ids.shape == (2, 2, 50) and ids.dtype == torch.int64
    assert ids[0, 0, :4].tolist() == [259, ord("I") + 1, 260, 261]  # begin-of-word, 'I', end-of-word, pad
    assert (ids[1, 1] == 0).all()
    with pytest.raises(TypeError, match="list of token lists"):
        batch_to_ids(["I ate"])


def test_embedder_stateful_embed_sentences_reproduces_the_fixtures():
    sentences, expected = fixture_flat()
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS)
    arrays = list(embedder.embed_sentences(sentences, batch_size=3))
    assert len(arrays) == len(expected)
    for array, want in zip(arrays, expected):
        assert array.shape == (3, want.shape[1], 32)
        np.testing.assert_allclose(top_as_fixture(array), want, atol=TOLERANCE, rtol=0)


def test_embedder_is_stateful_by_default_and_deterministic_on_request():
    sentence = ["The", "cat", "sat", "."]
    stateful = ElmoEmbedder(OPTIONS, WEIGHTS)
    first, second = stateful.embed_sentence(sentence), stateful.embed_sentence(sentence)
    assert np.abs(first[1:] - second[1:]).max() > 1e-4  # AllenNLP's carried state
    warm = ElmoEmbedder(OPTIONS, WEIGHTS, state="warm")
    np.testing.assert_array_equal(warm.embed_sentence(sentence), warm.embed_sentence(sentence))


def test_embed_batch_and_empty_sentence():
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS, state="reset")
    arrays = embedder.embed_batch([["a", "b", "c"], ["d"]])
    assert [a.shape for a in arrays] == [(3, 3, 32), (3, 1, 32)]
    assert embedder.embed_batch([[]])[0].shape == (3, 0, 32)


def test_elmo_called_batch_after_batch_reproduces_the_fixtures():
    elmo = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, scalar_mix_parameters=TOP_ONLY)
    for batch, expected in fixture_batches("allennlp"):
        out = elmo(batch_to_ids(batch))
        representation, mask = out["elmo_representations"][0], out["mask"]
        assert representation.shape[:2] == mask.shape
        for row, (tokens, want) in enumerate(zip(batch, expected)):
            assert mask[row].sum() == len(tokens)
            got = representation[row, :len(tokens)].detach().numpy()
            np.testing.assert_allclose(np.stack([got[:, :16], got[:, 16:]]), want, atol=TOLERANCE, rtol=0)


def test_elmo_output_dict_boundaries_and_extra_dimensions():
    elmo = Elmo(OPTIONS, WEIGHTS, 2, dropout=0.0, state="reset")
    sentences = [["I", "ate", "an", "apple"], ["Hi"]]
    out = elmo(batch_to_ids(sentences))
    assert set(out) == {"elmo_representations", "mask"}
    assert len(out["elmo_representations"]) == 2 and elmo.get_output_dim() == 32
    assert out["mask"].tolist() == [[True] * 4, [True, False, False, False]]
    kept = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, state="reset", keep_sentence_boundaries=True)(batch_to_ids(sentences))
    assert kept["mask"].sum(dim=1).tolist() == [6, 3]
    torch.testing.assert_close(kept["elmo_representations"][0][:, 1:5] * out["mask"][..., None],
                               out["elmo_representations"][0], rtol=0, atol=1e-6)
    nested = elmo(batch_to_ids(sentences).unsqueeze(0))  # (1, 2, timesteps, 50)
    assert nested["elmo_representations"][0].shape == (1, 2, 4, 32) and nested["mask"].shape == (1, 2, 4)
    torch.testing.assert_close(nested["elmo_representations"][0][0], out["elmo_representations"][0])


def test_vocab_to_cache_takes_word_ids():
    vocab = ["@@PADDING@@", "I", "ate", "an", "apple", "Hi"]
    by_words = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, vocab_to_cache=vocab, state="reset")
    by_chars = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, state="reset")
    word_ids = torch.tensor([[1, 2, 3, 4], [5, 0, 0, 0]])
    chars = batch_to_ids([["I", "ate", "an", "apple"], ["Hi"]])
    a = by_words(chars, word_ids)["elmo_representations"][0]
    b = by_chars(chars)["elmo_representations"][0]
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="outside vocab_to_cache"):
        by_words(None, torch.tensor([[9]]))
    with pytest.raises(ValueError, match="without vocab_to_cache"):
        by_chars(None, word_ids)


def test_layer_norm_and_fixed_mix_parameters():
    elmo = Elmo(OPTIONS, WEIGHTS, 1, do_layer_norm=True, dropout=0.0, scalar_mix_parameters=[1.0, 2.0, 3.0],
                state="reset")
    mix = elmo._scalar_mixes[0]
    assert [(p.requires_grad, p.item()) for p in mix.scalar_parameters] == [(False, 1.0), (False, 2.0), (False, 3.0)]
    assert not mix.gamma.requires_grad  # AllenNLP: fixed parameters freeze the whole mix
    assert Elmo(OPTIONS, WEIGHTS, 1, state="reset")._scalar_mixes[0].gamma.requires_grad
    out = elmo(batch_to_ids([["a", "b"]]))["elmo_representations"][0]
    assert torch.isfinite(out).all() and out.shape == (1, 2, 32)


def test_requires_grad_fine_tunes_the_bilm():
    elmo = Elmo(OPTIONS, WEIGHTS, 1, requires_grad=True, dropout=0.0, state="reset")
    frozen = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, state="reset")
    assert all(p.requires_grad for p in elmo._elmo_lstm.parameters())
    assert not any(p.requires_grad for p in frozen._elmo_lstm.parameters())
    ids = batch_to_ids([["The", "cat", "sat", "."], ["Dogs", "bark"]])
    head = torch.nn.Linear(32, 2)
    labels = torch.tensor([[0, 1, 0, 1], [1, 0, 0, 0]])
    optimizer = torch.optim.SGD(list(elmo.parameters()) + list(head.parameters()), lr=0.5)
    before = elmo._elmo_lstm.bilm.forward_layers[0].state_weight.detach().clone()
    losses = []
    for _ in range(5):
        out = elmo(ids)
        logits = head(out["elmo_representations"][0])
        loss = torch.nn.functional.cross_entropy(logits[out["mask"]], labels[out["mask"]])
        optimizer.zero_grad()
        loss.backward()
        assert elmo._elmo_lstm.bilm.forward_layers[0].state_weight.grad.abs().sum() > 0
        optimizer.step()
        losses.append(loss.item())
    assert (elmo._elmo_lstm.bilm.forward_layers[0].state_weight - before).abs().max() > 1e-4
    assert losses[-1] < losses[0]
    # Without gradients (evaluation) the fast runtime runs on the tuned weights: same numbers.
    elmo.eval()
    with torch.no_grad():
        fast = elmo(ids)["elmo_representations"][0]
    slow = elmo(ids)["elmo_representations"][0]
    torch.testing.assert_close(fast, slow.detach(), rtol=0, atol=1e-5)


def test_embed_file_writes_the_embed_layout(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("The cat sat .\nDogs bark\n")
    out = tmp_path / "out.hdf5"
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS, state="reset")
    with open(text) as f:
        embedder.embed_file(f, str(out), output_format="top", batch_size=2)
    with h5py.File(out, "r") as f:
        assert json.loads(f["sentence_to_index"][0]) == {"The cat sat .": "0", "Dogs bark": "1"}
        assert f["0"].shape == (4, 32) and f["1"].shape == (2, 32)
        np.testing.assert_allclose(f["0"][...], embedder.embed_sentence("The cat sat .".split())[-1], atol=1e-6)


def test_arguments_that_make_no_sense_here_fail_clearly():
    with pytest.raises(ValueError, match="Don't provide options_file or weight_file with module"):
        Elmo(OPTIONS, WEIGHTS, 1, module=torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="num_output_representations"):
        Elmo(OPTIONS, WEIGHTS, 0)
    with pytest.raises(ValueError, match="scalar_mix_parameters: 2 values"):
        Elmo(OPTIONS, WEIGHTS, 1, scalar_mix_parameters=[0.0, 1.0])
    with pytest.raises(ValueError, match="cuda_device"):
        ElmoEmbedder(OPTIONS, WEIGHTS, cuda_device="0")
    with pytest.raises(ValueError, match=r"not the URL of a published model \(.*\), a model archive"):
        load_bilm("https://example.org/model/")


def test_published_urls_resolve_through_the_download_cache(monkeypatch):
    calls = []

    def cached_files(name, **options):  # the download cache, holding the fixture under every name
        calls.append(name)
        return OPTIONS, WEIGHTS

    monkeypatch.setattr("elmo.hub.resolve.model_files", cached_files)
    assert isinstance(load_bilm(DEFAULT_OPTIONS_FILE, DEFAULT_WEIGHT_FILE), BiLM)
    small = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x1024_128_2048cnn_1xhighway/"
    load_bilm(small + "elmo_2x1024_128_2048cnn_1xhighway_options.json",
              small + "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5")
    assert calls == ["original", "small"]


TUTORIAL = """
from elmo.allennlp import Elmo, batch_to_ids
from elmo.allennlp import ElmoEmbedder

options_file = {options!r}
weight_file = {weights!r}

# Compute two different representations for each token; each is a linear weighted combination
# of the 3 layers in ELMo (character-based embedding and the two LSTM layers).
elmo = Elmo(options_file, weight_file, 2, dropout=0)
sentences = [["First", "sentence", "."], ["Another", "."]]
character_ids = batch_to_ids(sentences)
embeddings = elmo(character_ids)
print(len(embeddings["elmo_representations"]), tuple(embeddings["elmo_representations"][0].shape))

ee = ElmoEmbedder(options_file, weight_file)
vectors = ee.embed_sentence(["I", "ate", "an", "apple", "for", "breakfast"])
print(vectors.shape)
"""


def test_a_tutorial_script_runs_with_only_its_imports_changed():
    script = textwrap.dedent(TUTORIAL.format(options=OPTIONS, weights=WEIGHTS))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["2 (2, 3, 32)", "(3, 6, 32)"]


@pytest.mark.slow  # several processes: CI runs it in its slow pass
def test_the_migration_page_snippets_run(tmp_path):
    import importlib.util
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "from-allennlp.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) >= 5
    flair_blocks = [b for b in blocks if "from flair" in b]
    assert len(flair_blocks) == 1 and "install_as_allennlp()" in flair_blocks[0]
    if importlib.util.find_spec("flair") is None:  # the `flair` extra (part of `test`) is not installed
        blocks = [b for b in blocks if b not in flair_blocks]
    # SeqVec and bio_embeddings install only by the page's recipe (--no-deps), never with elmo: their
    # snippets were run once by hand (the page says so) and run here where they are installed.
    for package in ("bio_embeddings", "seqvec"):
        if importlib.util.find_spec(package) is None:
            blocks = [b for b in blocks if f"from {package}" not in b and f"import {package}" not in b]
    for block in blocks:
        script = block.replace('"vectors.hdf5"', repr(str(tmp_path / "vectors.hdf5")))
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root)
        assert result.returncode == 0, (block, result.stderr)
    assert (tmp_path / "vectors.hdf5").exists()


def test_dropout_acts_in_training_mode_only():
    elmo = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.5, state="reset")
    ids = batch_to_ids([["The", "cat", "sat", "."]])
    elmo.train()
    torch.manual_seed(0)
    dropped = elmo(ids)["elmo_representations"][0]
    zeros = (dropped == 0).float().mean().item()
    assert 0.3 < zeros < 0.7  # about half of the values dropped
    elmo.eval()
    kept = elmo(ids)["elmo_representations"][0]
    assert (kept != 0).all()
    torch.testing.assert_close(dropped[dropped != 0], 2 * kept[dropped != 0], rtol=1e-5, atol=1e-6)
