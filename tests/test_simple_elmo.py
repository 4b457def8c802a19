"""elmo.simple_elmo, simple_elmo's API: the vectors simple_elmo itself computed (recorded once with
TensorFlow, tests/fixtures/simple_elmo/), its shapes and dtype, its state policy, and where it
differs on purpose (zero padding, averages over real tokens only)."""

import importlib.util
import json

import numpy as np
import pytest
from conftest import FIXTURES

from elmo.simple_elmo import ElmoModel, tokenize

pytestmark = pytest.mark.exactness

RECORDED = FIXTURES / "simple_elmo"
RECORD = json.loads((RECORDED / "sentences.json").read_text(encoding="utf-8"))
SENTENCES = RECORD["sentences"]
BATCH = RECORD["max_batch_size"]
LENGTHS = [len(s) for s in SENTENCES]
# TensorFlow's kernels and ours round float32 differently, and the recording was made on another
# CPU (maybe): recorded floats are compared with a tolerance, never bit for bit.
ATOL = 1e-5


@pytest.fixture(scope="module")
def expected():
    with np.load(RECORDED / "expected.npz", allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def nlpl(tmp_path_factory):
    """The recorded model in the NLPL layout, made by the fixture's own script: (folder, zip)."""
    spec = importlib.util.spec_from_file_location("make_simple_elmo_fixture", RECORDED / "make_fixture.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.SENTENCES == SENTENCES and script.BATCH == BATCH
    folder, archive = script.make_model(str(FIXTURES / "allennlp-elmo"), str(tmp_path_factory.mktemp("nlpl")))
    return folder, archive


@pytest.fixture(scope="module")
def model(nlpl):
    m = ElmoModel()
    assert m.load(nlpl[0], max_batch_size=BATCH) == "The model is now loaded."
    return m


def real_tokens_diff(ours, theirs, all_layers=False):
    """Largest difference over each sentence's own tokens."""
    return max(float(np.abs(ours[i, ..., :n, :] - theirs[i, ..., :n, :]).max()) if all_layers
               else float(np.abs(ours[i, :n] - theirs[i, :n]).max()) for i, n in enumerate(LENGTHS))


@pytest.mark.parametrize("name, kwargs", [("average", {}), ("all", {"layers": "all"}),
                                          ("top_no_warmup", {"layers": "top", "warmup": False})])
def test_vectors_are_simple_elmos(model, expected, name, kwargs):
    ours = model.get_elmo_vectors(SENTENCES, **kwargs)
    theirs = expected[name]
    assert ours.shape == theirs.shape == tuple(RECORD["arrays"][name]["shape"])
    assert ours.dtype == theirs.dtype == np.float64
    assert real_tokens_diff(ours, theirs, all_layers=name == "all") <= ATOL
    # Past each sentence's end: zero here (simple_elmo leaves the token layer of empty tokens there).
    for i, n in enumerate(LENGTHS):
        assert not ours[i, ..., n:, :].any()


def test_zip_and_default_batch_size(nlpl, expected):
    m = ElmoModel()
    m.load(nlpl[1])
    assert (m.batch_size, m.vector_size, m.n_layers, m.max_chars) == (32, 32, 3, 50)
    assert real_tokens_diff(m.get_elmo_vectors(SENTENCES), expected["zip_default_batch"]) <= ATOL


def test_batch_size_is_read_at_each_call(nlpl, expected):
    """As simple_elmo reads ``self.batch_size`` at each call, setting it after load counts."""
    m = ElmoModel()
    m.load(nlpl[0], max_batch_size=BATCH)
    m.batch_size = 32
    assert real_tokens_diff(m.get_elmo_vectors(SENTENCES), expected["zip_default_batch"]) <= ATOL
    m.batch_size = 0
    with pytest.raises(ValueError, match="batch_size: must be at least 1, got 0"):
        m.get_elmo_vectors(SENTENCES)


def test_the_state_policy_matters(model, expected):
    """The recorded numbers tell the policies apart, so the tests above would catch a wrong one:
    without the warm-up batch, or with another batch size, the vectors move far past ATOL."""
    assert real_tokens_diff(model.get_elmo_vectors(SENTENCES, warmup=False), expected["average"]) > 100 * ATOL
    assert real_tokens_diff(model.get_elmo_vectors(SENTENCES), expected["zip_default_batch"]) > 100 * ATOL
    # Each call starts from zero state, as each of simple_elmo's calls opens a fresh session.
    assert np.array_equal(model.get_elmo_vectors(SENTENCES), model.get_elmo_vectors(SENTENCES))


def test_recorded_padding_is_not_zero(expected):
    """What the docs say of simple_elmo's padding, on its own numbers: inside a batch's longest
    sentence, the token layer holds the CNN's output for an empty token; the LSTM layers hold 0."""
    recorded = expected["all"]
    assert np.abs(recorded[0, 0, LENGTHS[0]:]).max() > 0.1        # sentence 0 of batch 0 (7 of 11)
    assert not recorded[0, 1:, LENGTHS[0]:].any()


def test_vector_average_over_real_tokens(model, expected):
    ours = model.get_elmo_vector_average(SENTENCES)
    theirs = expected["vector_average"]
    assert ours.shape == theirs.shape and ours.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-12)
    vectors = model.get_elmo_vectors(SENTENCES)
    for i, n in enumerate(LENGTHS):
        mean = vectors[i, :n].mean(axis=0)
        np.testing.assert_allclose(ours[i], mean / np.linalg.norm(mean), atol=1e-12)
    # Where a sentence is its batch's longest, simple_elmo's average has no padding in it and the
    # two agree; elsewhere its padding moves the vector (cosine below 0.9999).
    longest = {0: 11, 1: 5, 2: 1}
    for i, n in enumerate(LENGTHS):
        cosine = float(ours[i] @ theirs[i])
        if n == longest[i // BATCH]:
            assert np.abs(ours[i] - theirs[i]).max() <= ATOL
        else:
            assert cosine < 0.9999, i


def test_vector_average_all_layers_and_empty(model):
    per_layer = model.get_elmo_vector_average(SENTENCES[:2], layers="all")
    assert per_layer.shape == (2, 3, 32)
    np.testing.assert_allclose(np.linalg.norm(per_layer, axis=-1), 1.0, atol=1e-12)
    empty = model.get_elmo_vector_average([[], ["bank"]])
    assert not empty[0].any() and abs(np.linalg.norm(empty[1]) - 1) < 1e-12


def test_shapes_of_odd_inputs(model):
    assert model.get_elmo_vectors([[], ["a", "b"]]).shape == (2, 2, 32)
    assert model.get_elmo_vectors([]).shape == (0, 0, 32)
    assert model.get_elmo_vectors([["a"]], layers="all").shape == (1, 3, 1, 32)


def test_errors_name_the_fault(model, nlpl, tmp_path):
    with pytest.raises(TypeError, match=r"texts\[1\]: expected a list of words, got the string 'two words'"):
        model.get_elmo_vectors([["one"], "two words"])
    with pytest.raises(TypeError, match="texts: expected a list of sentences"):
        model.get_elmo_vectors("one sentence")
    with pytest.raises(TypeError, match="session: elmo runs no TensorFlow session"):
        model.get_elmo_vectors([["a"]], session=object())
    with pytest.raises(ValueError, match="layers: expected one of 'average', 'top', 'all', got 'middle'"):
        model.get_elmo_vector_average([["a"]], layers="middle")
    with pytest.raises(RuntimeError, match="call load"):
        ElmoModel().get_elmo_vectors([["a"]])
    with pytest.raises(ValueError, match="full=True: TensorFlow checkpoints"):
        ElmoModel().load(nlpl[0], full=True)
    with pytest.raises(ValueError, match="max_batch_size: must be at least 1, got 0"):
        ElmoModel().load(nlpl[0], max_batch_size=0)
    with pytest.raises(ValueError, match="nor an existing path"):
        ElmoModel().load(str(tmp_path / "missing.zip"))


def test_tokenize():
    assert tokenize("Det regner, i Oslo!") == ["Det", "regner", "i", "Oslo"]
    assert tokenize("a b c", limit=2) == ["a", "b"]
