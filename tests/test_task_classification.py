"""The sentence classifier (elmo.tasks.classification, BCN): shapes, gradients, exact masking with
and without ELMo, and that it learns a tiny synthetic task. The checks that hold for every
classifier of sentences or pairs run on ESIM (elmo.tasks.entailment) too, through the helpers here;
ESIM's own checks are in test_task_entailment.py."""

import random

import pytest
import torch

from elmo.tasks.classification import ClassificationBatch, SentenceClassifier
from elmo.tasks.entailment import ESIM, PairBatch
from elmo.tasks.features import (
    TASK_MAX_CHARS,
    TokenFeatures,
    WordVocab,
    char_ids,
    word_ids,
)
from elmo.tasks.integration import ElmoOptions, TaskElmo

VOCAB = WordVocab("good bad the a movie film plot was is very not fun dull cast".split())
N_LAYERS, ELMO_DIM, HIDDEN, N_CLASSES = 3, 6, 8, 3
SETTINGS = ("disabled", "input", "output", "both")


def make_model(kind: str, setting: str, **kwargs):
    options = ElmoOptions(enabled=False) if setting == "disabled" else ElmoOptions(placement=setting)
    features = TokenFeatures(torch.randn(len(VOCAB), 8), char_filters=4)
    elmo = TaskElmo(options, N_LAYERS, ELMO_DIM)
    model_class = SentenceClassifier if kind == "bcn" else ESIM
    return model_class(features, elmo, kwargs.pop("n_classes", N_CLASSES), hidden=HIDDEN, **kwargs)


def random_layers(sentences):
    """Cached biLM layers of the right length for each sentence: ``(L+1, n, dim)``."""
    return [torch.randn(N_LAYERS, len(s), ELMO_DIM) for s in sentences]


def sentence_batch(sentences, layers=None, time=None, garbage=False):
    """A batch of sentences padded to ``time``. With ``garbage`` the padding holds random word ids,
    characters and huge ELMo values instead of zeros: a model must ignore them all."""
    time = time if time is not None else max(len(s) for s in sentences)
    lengths = torch.tensor([len(s) for s in sentences])
    mask = torch.arange(time).unsqueeze(0) < lengths.unsqueeze(1)
    words, chars = word_ids(sentences, VOCAB, time), char_ids(sentences, time)
    elmo = None
    if layers is not None:
        elmo = torch.zeros(len(sentences), N_LAYERS, time, ELMO_DIM)
        for row, layer in enumerate(layers):
            elmo[row, :, :layer.shape[1]] = layer
    if garbage:
        pad = ~mask
        words[pad] = torch.randint(2, len(VOCAB), (int(pad.sum()),))
        chars[pad] = torch.randint(1, 200, (int(pad.sum()), TASK_MAX_CHARS))
        if elmo is not None:
            elmo = torch.where(mask[:, None, :, None], elmo, 100 * torch.randn_like(elmo))
    return ClassificationBatch(words=words, chars=chars, mask=mask, elmo=elmo)


def make_batch(kind, examples, labels=None, with_elmo=True, garbage=False, time=None):
    """``examples``: sentences (bcn) or (premise, hypothesis) pairs (esim)."""
    def side(sentences, layers):
        return sentence_batch(sentences, layers if with_elmo else None, time=time, garbage=garbage)

    if kind == "bcn":
        batch = side(examples, random_layers(examples))
    else:
        premises, hypotheses = [p for p, _ in examples], [h for _, h in examples]
        batch = PairBatch(side(premises, random_layers(premises)), side(hypotheses, random_layers(hypotheses)))
    if labels is not None:
        batch.label = torch.tensor(labels)
    return batch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These models are tiny: extra intra-op threads only add overhead (and fight a busy CPU)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


SENTENCES = [["the", "movie", "was", "good"], ["a", "dull", "plot"], ["very", "fun", "cast", "is", "not", "bad"]]
PAIRS = [(["the", "movie", "was", "good"], ["the", "film"]),
         (["a", "dull", "plot"], ["very", "bad", "plot", "is", "dull"]),
         (["fun", "cast"], ["the", "cast", "was", "very", "fun", "good"])]
EXAMPLES = {"bcn": SENTENCES, "esim": PAIRS}


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("kind", ["bcn", "esim"])
def test_training_step(kind, setting):
    model = make_model(kind, setting).train()
    batch = make_batch(kind, EXAMPLES[kind], labels=[0, 1, 2], with_elmo=setting != "disabled")
    assert model.logits(batch).shape == (3, N_CLASSES)
    loss = model.loss(batch)
    assert loss.shape == () and torch.isfinite(loss)
    loss.backward()

    mixes = [m for m in (model.elmo.input_mix, model.elmo.output_mix) if m is not None]
    assert len(mixes) == {"disabled": 0, "input": 1, "output": 1, "both": 2}[setting]
    for mix in mixes:  # layers="mix": the layer weights and gamma learn
        assert mix.scalars.grad is not None and mix.scalars.grad.abs().sum() > 0
        assert mix.gamma.grad is not None and mix.gamma.grad.abs().sum() > 0
    assert not model.features.words.weight.requires_grad and model.features.words.weight.grad is None
    assert model.features.chars.conv.weight.grad.abs().sum() > 0
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("kind", ["bcn", "esim"])
def test_same_model_with_and_without_elmo(kind):
    """Besides the mixes, ELMo only widens the layers it is concatenated to."""
    plain, with_elmo = make_model(kind, "disabled"), make_model(kind, "both")
    shapes = lambda m: {k: v.shape for k, v in m.state_dict().items() if not k.startswith("elmo.")}  # noqa: E731
    plain_shapes, elmo_shapes = shapes(plain), shapes(with_elmo)
    assert plain_shapes.keys() == elmo_shapes.keys()
    widened = {k for k in plain_shapes if plain_shapes[k] != elmo_shapes[k]}
    if kind == "bcn":
        assert widened == {"pre_encode.weight", "self_attention.weight", "hidden.weight"}
    else:
        # The paper's output placement: ELMo joins the input encoder's states before the attention,
        # so the projection of the enhanced states widens and the composition LSTM does not.
        assert widened == {"input_encoder.weight_ih_l0", "input_encoder.weight_ih_l0_reverse",
                           "projection.weight"}


@pytest.mark.parametrize("setting", ["disabled", "both"])
@pytest.mark.parametrize("kind", ["bcn", "esim"])
def test_padding_never_changes_the_result(kind, setting):
    """An example alone gives the logits it gets in a batch padded for a longer example, whatever
    the padding holds (random word ids, characters, huge ELMo values)."""
    model = make_model(kind, setting).eval()
    with_elmo = setting != "disabled"
    # Both sides of the batch are padded past both examples' lengths (to 9, or to 7 and 8 tokens).
    short, long = EXAMPLES[kind][1], EXAMPLES[kind][2]
    if kind == "bcn":
        layers = random_layers([short, long])
        alone = sentence_batch([short], layers[:1] if with_elmo else None)
        padded = sentence_batch([short, long], layers if with_elmo else None, time=9, garbage=True)
    else:
        premise_layers, hypothesis_layers = random_layers([short[0], long[0]]), random_layers([short[1], long[1]])
        alone = PairBatch(sentence_batch([short[0]], premise_layers[:1] if with_elmo else None),
                          sentence_batch([short[1]], hypothesis_layers[:1] if with_elmo else None))
        padded = PairBatch(sentence_batch([short[0], long[0]], premise_layers if with_elmo else None,
                                          garbage=True, time=7),
                           sentence_batch([short[1], long[1]], hypothesis_layers if with_elmo else None,
                                          garbage=True, time=8))
    with torch.no_grad():
        expected, got = model.logits(alone)[0], model.logits(padded)[0]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["bcn", "esim"])
def test_empty_sentence_gives_finite_results(kind):
    model = make_model(kind, "both").train()
    examples = [[], ["the", "film"]] if kind == "bcn" else [(["the", "film"], []), ([], ["a", "plot"])]
    batch = make_batch(kind, examples, labels=[0, 1])
    loss = model.loss(batch)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("kind", ["bcn", "esim"])
def test_elmo_model_needs_layers(kind):
    model = make_model(kind, "input")
    batch = make_batch(kind, EXAMPLES[kind], labels=[0, 1, 2], with_elmo=False)
    with pytest.raises(ValueError, match="no biLM layers"):
        model.loss(batch)
    # Without ELMo the same batch is fine.
    assert torch.isfinite(make_model(kind, "disabled").loss(batch))


def train_until_perfect(model, batch, labels, max_steps=60):
    """Adam on one full batch; returns the step at which train accuracy (eval mode) hits 100%.

    The models are built without dropout and without ELMo: random cached layers would let them
    memorise the labels instead of learning the rule, and dropout only slows a 24-example fit."""
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.02)
    for step in range(1, max_steps + 1):
        model.train()
        optimizer.zero_grad()
        model.loss(batch).backward()
        optimizer.step()
        if step % 5 == 0:
            model.eval()
            if model.predict(batch) == labels:
                return step
    return None


CONTENT = ["bad", "the", "a", "movie", "film", "plot", "was", "is", "very", "not", "fun", "dull", "cast"]


def test_bcn_learns_whether_good_appears():
    rng = random.Random(0)
    sentences, labels = [], []
    for i in range(24):
        sentence = [rng.choice(CONTENT) for _ in range(rng.randint(2, 6))]
        if i % 2:
            sentence[rng.randrange(len(sentence))] = "good"
        sentences.append(sentence)
        labels.append(i % 2)
    model = make_model("bcn", "disabled", n_classes=2, dropout=0.0)
    batch = make_batch("bcn", sentences, labels=labels, with_elmo=False)
    assert train_until_perfect(model, batch, labels) is not None
