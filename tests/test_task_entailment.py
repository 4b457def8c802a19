"""ESIM (elmo.tasks.entailment): where its output ELMo joins, that it is not symmetric, and that it
learns a tiny synthetic task. Shapes, gradients and masking are checked with the sentence
classifier's in test_task_classification.py."""

import random

import torch
from test_task_classification import (  # noqa: F401 (_one_thread: the module's autouse fixture)
    CONTENT,
    ELMO_DIM,
    HIDDEN,
    PAIRS,
    _one_thread,
    make_batch,
    make_model,
    train_until_perfect,
)

from elmo.tasks.entailment import PairBatch


def test_esim_output_elmo_joins_the_encoder_states_before_the_attention():
    """The paper's ESIM output placement: the enhanced vectors [a; a~; a - a~; a * a~] that reach
    the projection carry the output ELMo in a, and the other side's ELMo, attention-weighted, in a~."""
    model = make_model("esim", "output").eval()
    batch = make_batch("esim", PAIRS)
    seen = []
    handle = model.projection.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    with torch.no_grad():
        model.logits(batch)
        elmo_a = model.elmo.for_output(batch.premise.elmo, batch.premise.mask)      # (B, Ta, E)
        elmo_b = model.elmo.for_output(batch.hypothesis.elmo, batch.hypothesis.mask)  # (B, Tb, E)
    handle.remove()
    enhanced_a = seen[0]                                                  # (B, Ta, 4D)
    width = 2 * HIDDEN + ELMO_DIM
    assert enhanced_a.shape[-1] == 4 * width
    a, a_aligned = enhanced_a[..., :width], enhanced_a[..., width:2 * width]
    mask_a, mask_b = batch.premise.mask, batch.hypothesis.mask
    torch.testing.assert_close(a[..., 2 * HIDDEN:][mask_a], elmo_a[mask_a])
    # a~'s ELMo part is a convex combination of the hypothesis's ELMo vectors at its real tokens.
    for row in range(len(PAIRS)):
        weights = torch.linalg.lstsq(elmo_b[row][mask_b[row]].T, a_aligned[row, :, 2 * HIDDEN:][mask_a[row]].T).solution
        torch.testing.assert_close(weights.sum(dim=0), torch.ones(int(mask_a[row].sum())), atol=1e-4, rtol=0)
        assert (weights > -1e-4).all()


def test_esim_is_not_symmetric():
    model = make_model("esim", "both").eval()
    batch = make_batch("esim", PAIRS)
    swapped = PairBatch(premise=batch.hypothesis, hypothesis=batch.premise)
    with torch.no_grad():
        assert not torch.allclose(model.logits(batch), model.logits(swapped), atol=1e-4)


def test_esim_learns_whether_first_words_match():
    rng = random.Random(0)
    words = CONTENT[:6]
    pairs, labels = [], []
    for i in range(24):
        premise = [rng.choice(words) for _ in range(rng.randint(2, 5))]
        hypothesis = [rng.choice(words) for _ in range(rng.randint(2, 5))]
        if i % 2:
            hypothesis[0] = premise[0]
        else:
            hypothesis[0] = rng.choice([w for w in words if w != premise[0]])
        pairs.append((premise, hypothesis))
        labels.append(i % 2)
    model = make_model("esim", "disabled", n_classes=2, dropout=0.0)
    batch = make_batch("esim", pairs, labels=labels, with_elmo=False)
    assert train_until_perfect(model, batch, labels) is not None
