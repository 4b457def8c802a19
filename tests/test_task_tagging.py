import itertools

import pytest
import torch

from elmo.tasks.features import TokenFeatures, WordVocab, char_ids, word_ids
from elmo.tasks.integration import ElmoOptions, TaskElmo
from elmo.tasks.tagging import CRF, Tagger, TaggingBatch

N_LAYERS, ELMO_DIM = 3, 6  # the fake biLM: L+1 = 3 layers of 6


@pytest.fixture(autouse=True)
def one_thread():
    """These models are tiny: one thread is fastest, and far faster when the CPU is busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- CRF against brute force ---------------------------------------------------------------------

def random_crf(n_tags: int) -> CRF:
    crf = CRF(n_tags)
    with torch.no_grad():
        crf.transitions.normal_()
        crf.start.normal_()
        crf.end.normal_()
    return crf


def lengths_mask(lengths: list[int], time: int) -> torch.Tensor:
    return torch.arange(time).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)


def brute_score(crf: CRF, emissions: torch.Tensor, tags: tuple[int, ...]) -> torch.Tensor:
    """Score of one unpadded tag sequence, straight from the definition."""
    score = crf.start[tags[0]] + crf.end[tags[-1]]
    for t, tag in enumerate(tags):
        score = score + emissions[t, tag]
        if t > 0:
            score = score + crf.transitions[tags[t - 1], tag]
    return score


def all_sequences(n_tags: int, length: int):
    return list(itertools.product(range(n_tags), repeat=length))


def test_crf_log_likelihood_matches_brute_force():
    torch.manual_seed(0)
    n_tags, time = 3, 4
    crf = random_crf(n_tags)
    lengths = [4, 2, 3, 1]
    emissions = torch.randn(len(lengths), time, n_tags)
    mask = lengths_mask(lengths, time)
    for row, length in enumerate(lengths):
        sequences = all_sequences(n_tags, length)
        with torch.no_grad():
            scores = torch.stack([brute_score(crf, emissions[row], s) for s in sequences])
            log_z = torch.logsumexp(scores, dim=0)
            # Score every sequence of this row at once, with random junk in the padding.
            tags = torch.randint(n_tags, (len(sequences), time))
            tags[:, :length] = torch.tensor(sequences)
            rows = emissions[row].expand(len(sequences), -1, -1)
            got = crf.log_likelihood(rows, tags, mask[row].expand(len(sequences), -1))
        torch.testing.assert_close(got, scores - log_z, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got.exp().sum(), torch.tensor(1.0), rtol=1e-5, atol=1e-5)

    # The same values when the rows share one batch (padding at different places).
    with torch.no_grad():
        tags = torch.randint(n_tags, (len(lengths), time))
        batched = crf.log_likelihood(emissions, tags, mask)
        for row, length in enumerate(lengths):
            alone = crf.log_likelihood(emissions[row:row + 1, :length], tags[row:row + 1, :length],
                                       mask[row:row + 1, :length])
            torch.testing.assert_close(batched[row:row + 1], alone)


def test_crf_log_likelihood_gradients_match_brute_force():
    torch.manual_seed(0)
    crf = random_crf(3)
    emissions = torch.randn(2, 3, 3, requires_grad=True)
    lengths = [3, 2]
    mask = lengths_mask(lengths, 3)
    tags = torch.randint(3, (2, 3))
    crf.log_likelihood(emissions, tags, mask).sum().backward()
    got = [emissions.grad, crf.transitions.grad, crf.start.grad, crf.end.grad]
    # The same log-likelihoods from the definition (every sequence enumerated), through autograd.
    expected_emissions = emissions.detach().clone().requires_grad_(True)
    expected_crf = random_crf(3)
    expected_crf.load_state_dict(crf.state_dict())
    total = 0
    for row, length in enumerate(lengths):
        scores = torch.stack([brute_score(expected_crf, expected_emissions[row], s)
                              for s in all_sequences(3, length)])
        gold = brute_score(expected_crf, expected_emissions[row], tuple(tags[row, :length].tolist()))
        total = total + gold - torch.logsumexp(scores, dim=0)
    total.backward()
    expected = [expected_emissions.grad, expected_crf.transitions.grad, expected_crf.start.grad,
                expected_crf.end.grad]
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert (emissions.grad[1, 2] == 0).all()  # padding takes no part


def test_viterbi_matches_brute_force():
    torch.manual_seed(1)
    n_tags, time = 3, 4
    for trial in range(5):
        crf = random_crf(n_tags)
        lengths = [4, 1, 3, 2, 4]
        emissions = 2 * torch.randn(len(lengths), time, n_tags)
        paths = crf.viterbi_decode(emissions, lengths_mask(lengths, time))
        for row, length in enumerate(lengths):
            sequences = all_sequences(n_tags, length)
            with torch.no_grad():
                scores = torch.stack([brute_score(crf, emissions[row], s) for s in sequences])
            assert paths[row] == list(sequences[int(scores.argmax())]), (trial, row)


def test_crf_zero_length_rows():
    torch.manual_seed(0)
    crf = random_crf(3)
    emissions = torch.randn(3, 4, 3, requires_grad=True)
    mask = lengths_mask([2, 0, 4], 4)
    tags = torch.randint(3, (3, 4))
    log_likelihood = crf.log_likelihood(emissions, tags, mask)
    assert log_likelihood[1] == 0 and torch.isfinite(log_likelihood).all()
    log_likelihood.sum().backward()
    assert torch.isfinite(emissions.grad).all()
    paths = crf.viterbi_decode(emissions, mask)
    assert [len(p) for p in paths] == [2, 0, 4]
    # A batch with no time steps at all.
    empty = torch.zeros(2, 0, 3)
    no_time = torch.zeros(2, 0, dtype=torch.bool)
    assert crf.log_likelihood(empty, torch.zeros(2, 0, dtype=torch.long), no_time).tolist() == [0.0, 0.0]
    assert crf.viterbi_decode(empty, no_time) == [[], []]


# --- Tagger --------------------------------------------------------------------------------------

SENTENCES = [["The", "cat", "sat"], ["Paris", "is", "big", "and", "Old"], ["hello"]]


def make_vocab(sentences) -> WordVocab:
    return WordVocab.build(sentences)


def make_features(vocab: WordVocab, dim: int = 8, char_filters: int = 12) -> TokenFeatures:
    return TokenFeatures(torch.randn(len(vocab), dim), char_filters=char_filters)


def make_batch(sentences, vocab: WordVocab, tags=None, with_elmo: bool = True, junk_padding: bool = False):
    words = word_ids(sentences, vocab)
    mask = words != 0
    batch = TaggingBatch(words=words, chars=char_ids(sentences), mask=mask, elmo=None)
    if with_elmo:
        layers = torch.randn(len(sentences), N_LAYERS, words.shape[1], ELMO_DIM)
        if not junk_padding:
            layers = layers * mask[:, None, :, None]
        batch.elmo = layers
    if tags is not None:
        batch.tags = torch.zeros_like(words)
        for row, row_tags in enumerate(tags):
            batch.tags[row, :len(row_tags)] = torch.tensor(row_tags)
    return batch


def make_tagger(vocab, placement: str | None, *, crf: bool = True, hidden: int = 10, dropout: float = 0.5,
                layers: int = 1, n_tags: int = 3) -> Tagger:
    """``placement`` None: the baseline (ELMo disabled); else ELMo with a learned mix there."""
    options = ElmoOptions(enabled=placement is not None, placement=placement or "input", layers="mix")
    elmo = TaskElmo(options, N_LAYERS, ELMO_DIM)
    return Tagger(make_features(vocab), elmo, n_tags, hidden=hidden, layers=layers, dropout=dropout, crf=crf)


@pytest.mark.parametrize("crf", [True, False])
@pytest.mark.parametrize("placement", [None, "input", "output", "both"])
def test_tagger_shapes_loss_and_gradients(placement, crf):
    torch.manual_seed(0)
    vocab = make_vocab(SENTENCES)
    model = make_tagger(vocab, placement, crf=crf)
    tags = [[t % 3 for t in range(len(s))] for s in SENTENCES]
    batch = make_batch(SENTENCES, vocab, tags, with_elmo=placement is not None)

    scores = model.scores(batch)
    assert scores.shape == (3, 5, 3)
    loss = model.loss(batch)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()

    assert model.features.words.weight.grad is None  # frozen word vectors stay untouched
    # Every trained part gets a gradient that is not zero (None or zeros: cut out of the loss).
    trained = [model.features.chars.conv.weight, model.encoder.weight_ih_l0]
    if placement in ("input", "both"):
        trained += [model.elmo.input_mix.scalars, model.elmo.input_mix.gamma]
    if placement in ("output", "both"):
        trained += [model.elmo.output_mix.scalars, model.elmo.output_mix.gamma]
    for parameter in trained:
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0
    model.eval()
    # Varied scores and transitions, so that decoding has something to decide; seeded here, so that
    # they do not depend on how many random numbers the training pass above drew.
    torch.manual_seed(1)
    with torch.no_grad():
        model.projection.weight.normal_(std=3.0)
        if crf:
            model.crf.transitions.normal_()
            model.crf.start.normal_()
            model.crf.end.normal_()
        scores = model.scores(batch)
    predictions = model.predict(batch)
    # Each sentence's prediction is the best-scoring tag sequence over every possible one: with the
    # CRF's transitions, or the sum of the tokens' own scores without a CRF.
    for row, sentence in enumerate(SENTENCES):
        sequences = all_sequences(3, len(sentence))
        with torch.no_grad():
            if crf:
                totals = torch.stack([brute_score(model.crf, scores[row], s) for s in sequences])
            else:
                totals = torch.stack([scores[row, torch.arange(len(s)), list(s)].sum() for s in sequences])
        assert predictions[row] == list(sequences[int(totals.argmax())]), row
    assert len({tag for p in predictions for tag in p}) > 1  # not one tag everywhere


def test_tagger_without_crf_has_no_crf_parameters():
    vocab = make_vocab(SENTENCES)
    assert make_tagger(vocab, None, crf=False).crf is None
    assert isinstance(make_tagger(vocab, None, crf=True).crf, CRF)


def test_tagger_loss_includes_elmo_l2_penalty():
    torch.manual_seed(0)
    vocab = make_vocab(SENTENCES)
    model = make_tagger(vocab, "both", dropout=0.0)
    batch = make_batch(SENTENCES, vocab, [[0] * len(s) for s in SENTENCES])
    model.eval()
    before = model.loss(batch)
    with torch.no_grad():
        model.elmo.input_mix.scalars.fill_(1.0)   # softmax weights unchanged: only the penalty moves
        model.elmo.output_mix.scalars.fill_(2.0)
    after = model.loss(batch)
    expected = 0.001 * (N_LAYERS * 1.0 + N_LAYERS * 4.0)
    torch.testing.assert_close(after - before, torch.tensor(expected), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("layers", [1, 2])
def test_baseline_and_elmo_models_differ_only_in_elmo_sizes(layers):
    vocab = make_vocab(SENTENCES)
    features_dim = make_features(vocab).output_dim
    models = {placement: make_tagger(vocab, placement, hidden=10, layers=layers)
              for placement in (None, "input", "output", "both")}
    shapes = {p: {name: tuple(w.shape) for name, w in m.encoder.named_parameters()} for p, m in models.items()}
    for placement, model in models.items():
        uses_input = placement in ("input", "both")
        uses_output = placement in ("output", "both")
        assert model.encoder.input_size == features_dim + (ELMO_DIM if uses_input else 0)
        assert model.projection.in_features == 20 + (ELMO_DIM if uses_output else 0)
        for name, shape in shapes[placement].items():
            if name.startswith("weight_ih_l0"):  # the first layer's input weights, both directions
                assert shape == (40, model.encoder.input_size)
            else:
                assert shape == shapes[None][name], name
        assert shapes[placement].keys() == shapes[None].keys()
        # Everything but the ELMo mixes and the sizes they change is the same.
        names = {n for n, _ in model.named_parameters() if not n.startswith("elmo.")}
        assert names == {n for n, _ in models[None].named_parameters()}


@pytest.mark.parametrize("placement", ["input", "output", "both"])
def test_elmo_model_rejects_batch_without_layers(placement):
    vocab = make_vocab(SENTENCES)
    model = make_tagger(vocab, placement)
    batch = make_batch(SENTENCES, vocab, [[0] * len(s) for s in SENTENCES], with_elmo=False)
    with pytest.raises(ValueError, match="biLM layers"):
        model.loss(batch)
    with pytest.raises(ValueError, match="biLM layers"):
        model.predict(batch)


def test_tagger_zero_length_sentence():
    torch.manual_seed(0)
    sentences = [["The", "cat"], []]
    vocab = make_vocab(sentences)
    model = make_tagger(vocab, "both")
    batch = make_batch(sentences, vocab, [[0, 1], []])
    loss = model.loss(batch)
    assert torch.isfinite(loss)
    loss.backward()
    model.eval()
    assert [len(p) for p in model.predict(batch)] == [2, 0]


def capitalisation_task(n_sentences: int = 20):
    """Tag 0 = lowercase, 1 = Capitalised, 2 = a number; every word occurs in both cases, so the
    (lowercased) word vectors cannot tell and the char CNN has to."""
    generator = torch.Generator().manual_seed(0)
    words = ["apple", "river", "stone", "cloud", "green", "table", "music", "north"]
    sentences, tags = [], []
    for _ in range(n_sentences):
        length = int(torch.randint(2, 8, (1,), generator=generator))
        sentence, sentence_tags = [], []
        for _ in range(length):
            kind = int(torch.randint(3, (1,), generator=generator))
            if kind == 2:
                sentence.append(str(int(torch.randint(10, 1000, (1,), generator=generator))))
            else:
                word = words[int(torch.randint(len(words), (1,), generator=generator))]
                sentence.append(word.capitalize() if kind == 1 else word)
            sentence_tags.append(kind)
        sentences.append(sentence)
        tags.append(sentence_tags)
    return sentences, tags


@pytest.mark.parametrize("placement", [None, "both"])
@pytest.mark.parametrize("crf", [True, False])
def test_tagger_overfits_tiny_task(crf, placement):
    torch.manual_seed(0)
    sentences, tags = capitalisation_task()
    vocab = make_vocab(sentences)
    model = make_tagger(vocab, placement, crf=crf, hidden=16, dropout=0.0)
    batch = make_batch(sentences, vocab, tags, with_elmo=placement is not None)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    model.train()
    for _ in range(60):
        optimizer.zero_grad()
        model.loss(batch).backward()
        optimizer.step()
    model.eval()
    assert model.predict(batch) == tags


@pytest.mark.parametrize("crf", [True, False])
@pytest.mark.parametrize("placement", [None, "input", "both"])
def test_predictions_do_not_depend_on_padding(crf, placement):
    torch.manual_seed(0)
    short, long = ["Paris", "is", "big"], ["The", "old", "cat", "sat", "on", "the", "mat"]
    vocab = make_vocab([short, long])
    model = make_tagger(vocab, placement, crf=crf).eval()
    with torch.no_grad():
        model.projection.weight.normal_()  # make the untrained predictions varied
    together = make_batch([short, long], vocab, with_elmo=placement is not None, junk_padding=True)
    alone = TaggingBatch(**{key: (value[:1, :, :len(short)] if key == "elmo" else value[:1, :len(short)])
                            if value is not None else None for key, value in together.tensors.items()})
    predictions = model.predict(together)
    assert model.predict(alone) == predictions[:1]
    torch.testing.assert_close(model.scores(alone), model.scores(together)[:1, :len(short)])
    assert len(predictions[1]) == len(long)
