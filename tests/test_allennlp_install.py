"""``install_as_allennlp()``: code that imports AllenNLP inside runs unchanged on the drop-in,
nothing else under ``allennlp`` pretends to exist, and a real AllenNLP is never shadowed.

Each check runs in a fresh interpreter: installing the stand-in changes ``sys.modules``."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ALLENNLP

ROOT = Path(__file__).resolve().parent.parent
OPTIONS, WEIGHTS = str(ALLENNLP / "options.json"), str(ALLENNLP / "lm_weights.hdf5")


def run_python(script: str, cwd: Path = ROOT, extra_path: Path | None = None) -> str:
    """Run ``script`` in a fresh interpreter (the tests folder importable); its standard output."""
    import os

    env = dict(os.environ)
    paths = [str(ROOT / "tests"), *([str(extra_path)] if extra_path else []), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                            cwd=cwd, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_two_modules_and_their_names_resolve_to_the_drop_in():
    out = run_python("""
        import elmo.allennlp
        elmo.allennlp.install_as_allennlp()
        elmo.allennlp.install_as_allennlp()  # a second call does nothing

        import allennlp.commands.elmo
        import allennlp.modules.elmo
        from allennlp.modules.elmo import Elmo, batch_to_ids, _ElmoBiLm, _ElmoCharacterEncoder
        from allennlp.commands.elmo import ElmoEmbedder, DEFAULT_OPTIONS_FILE, DEFAULT_WEIGHT_FILE
        from allennlp.modules import elmo as modules_elmo

        assert allennlp.modules.elmo is elmo.allennlp.modules is modules_elmo
        assert allennlp.commands.elmo is elmo.allennlp.commands
        assert (Elmo, batch_to_ids, _ElmoBiLm, _ElmoCharacterEncoder, ElmoEmbedder) == (
            elmo.allennlp.Elmo, elmo.allennlp.batch_to_ids, elmo.allennlp._ElmoBiLm,
            elmo.allennlp._ElmoCharacterEncoder, elmo.allennlp.ElmoEmbedder)
        assert DEFAULT_WEIGHT_FILE.endswith("elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5")

        from allennlp.modules.token_embedders import ElmoTokenEmbedder
        from allennlp.modules.token_embedders.elmo_token_embedder import ElmoTokenEmbedder as ByFile
        from allennlp.modules.scalar_mix import ScalarMix
        import allennlp.modules.token_embedders
        assert ElmoTokenEmbedder is ByFile is elmo.allennlp.ElmoTokenEmbedder
        assert ScalarMix is elmo.allennlp.ScalarMix
        assert allennlp.modules.token_embedders is elmo.allennlp.token_embedders
        print("ok")
    """)
    assert out.strip() == "ok"


def test_everything_else_under_allennlp_fails_saying_what_is_provided():
    out = run_python("""
        import elmo.allennlp
        elmo.allennlp.install_as_allennlp()
        import allennlp

        attempts = {
            "import allennlp.data": ModuleNotFoundError,
            "import allennlp.modules.highway": ModuleNotFoundError,
            "from allennlp.modules import Highway": ImportError,
            "from allennlp.commands import main": ImportError,
            "from allennlp.modules.elmo import ElmoLstm": ImportError,
            "allennlp.nn": AttributeError,
        }
        for statement, error in attempts.items():
            try:
                exec(statement)
            except error as e:
                print(statement, "|", type(e).__name__, "|", e)
            else:
                raise AssertionError(statement + " did not fail")
    """)
    lines = out.strip().splitlines()
    assert len(lines) == 6
    for line in lines[:5]:
        statement, kind, message = line.split(" | ")
        if statement != "from allennlp.modules.elmo import ElmoLstm":  # a name our module lacks: Python's error
            assert "provides only allennlp.modules.elmo" in message and "allennlp.commands.elmo" in message, line
            assert "allennlp.modules.token_embedders (ElmoTokenEmbedder)" in message, line
    assert "No module named 'allennlp.data'" in lines[0]
    assert "cannot import name 'ElmoLstm'" in lines[4]
    assert "provides only" in lines[5]


def test_a_real_allennlp_is_never_shadowed(tmp_path):
    real = tmp_path / "site" / "allennlp"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = True\n")
    out = run_python("""
        import sys
        import elmo.allennlp
        try:
            elmo.allennlp.install_as_allennlp()
        except RuntimeError as e:
            print("refused:", e)
        assert "allennlp" not in sys.modules
        import allennlp
        assert allennlp.REAL
        try:
            elmo.allennlp.install_as_allennlp()  # and not after it was imported either
        except RuntimeError as e:
            print("refused:", e)
    """, extra_path=tmp_path / "site")
    lines = out.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("refused: install_as_allennlp: a real allennlp") for line in lines)
    assert f"installed at {real / '__init__.py'}" in lines[0] and "imported from" in lines[1]


SEQVEC_STYLE = """
    # The import lines and calls of SeqVec's embedder (seqvec/seqvec.py, bio_embeddings'
    # SeqVecEmbedder): protein sequences as lists of one-letter tokens through ElmoEmbedder.
    from pathlib import Path

    import numpy as np
    import torch

    import elmo.allennlp
    elmo.allennlp.install_as_allennlp()

    from allennlp.commands.elmo import ElmoEmbedder

    model_dir, cpu = Path({folder!r}), True
    cuda_device = 0 if torch.cuda.is_available() and not cpu else -1
    model = ElmoEmbedder(weight_file=str(model_dir / "lm_weights.hdf5"),
                         options_file=str(model_dir / "options.json"), cuda_device=cuda_device)
    sequences = ["MKTAYIAKQR", "MVLSPADKTN", "GSHMA"]
    with torch.no_grad():
        embeddings = model.embed_batch([list(seq) for seq in sequences])
    assert len(embeddings) == len(sequences)
    per_residue = [e.sum(axis=0) for e in embeddings]  # SeqVec's default "sum" layer
    per_protein = [e.sum(axis=0).mean(axis=0) for e in embeddings]
    single = model.embed_sentence(list(sequences[2]))
    print([e.shape for e in embeddings], per_residue[0].shape, per_protein[0].shape, single.shape)

    reference = elmo.allennlp.ElmoEmbedder({options!r}, {weights!r})  # same calls, same order
    expected = reference.embed_batch([list(seq) for seq in sequences])
    for got, want in zip(embeddings, expected):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    np.testing.assert_allclose(single, reference.embed_sentence(list(sequences[2])), atol=1e-6, rtol=0)
"""


def test_a_seqvec_style_client_runs_unchanged():
    out = run_python(SEQVEC_STYLE.format(folder=str(ALLENNLP), options=OPTIONS, weights=WEIGHTS))
    assert out.strip() == "[(3, 10, 32), (3, 10, 32), (3, 5, 32)] (10, 32) (32,) (3, 5, 32)"


FLAIR = """
    import pickle

    import numpy as np
    import torch
    from conftest import fixture_batches

    import elmo.allennlp
    elmo.allennlp.install_as_allennlp()

    from flair.data import Sentence
    from flair.embeddings import ELMoEmbeddings

    def vectors(sentence):
        return torch.stack([token.get_embedding() for token in sentence]).cpu().numpy()

    embeddings = ELMoEmbeddings(options_file={options!r}, weight_file={weights!r}, embedding_mode="all")
    assert embeddings.embedding_length == 96  # three layers of 32, concatenated

    # flair embedded a dummy "hello" when it was built; AllenNLP's state carried it over.
    reference = elmo.allennlp.ElmoEmbedder({options!r}, {weights!r})
    reference.embed_batch([["hello"]])
    batch = [["The", "grass", "is", "green", "."], ["Dogs", "bark"]]
    sentences = [Sentence(tokens) for tokens in batch]
    embeddings.embed(sentences)
    for sentence, want in zip(sentences, reference.embed_batch(batch)):
        np.testing.assert_allclose(vectors(sentence), np.concatenate(list(want), axis=-1), atol=1e-6, rtol=0)

    # The original implementation's numbers through flair, batch after batch (stateful).
    embeddings.ee.elmo_bilm._elmo_lstm.reset_states()
    for batch, expected in fixture_batches("allennlp"):
        sentences = [Sentence(tokens) for tokens in batch]
        embeddings.embed(sentences)
        for sentence, want in zip(sentences, expected):
            top = vectors(sentence)[:, 64:]
            np.testing.assert_allclose(np.stack([top[:, :16], top[:, 16:]]), want, atol=1e-5, rtol=0)

    # flair saves models by pickling them; its __setstate__ moves ee.elmo_bilm._elmo_lstm._states.
    copy = pickle.loads(pickle.dumps(embeddings))
    first, second = Sentence("A new sentence ."), Sentence("A new sentence .")
    embeddings.embed(first)
    copy.embed(second)
    np.testing.assert_allclose(vectors(first), vectors(second), atol=1e-5, rtol=0)

    top = ELMoEmbeddings(options_file={options!r}, weight_file={weights!r}, embedding_mode="top")
    sentence = Sentence("The grass is green .")
    top.embed(sentence)
    print(embeddings.embedding_length, top.embedding_length, vectors(sentence).shape)
"""


def test_flairs_legacy_elmo_embeddings_run_unchanged():
    """flair's own ELMoEmbeddings (flair/embeddings/legacy.py), which imports
    allennlp.commands.elmo inside; flair is in the `flair` extra, which `test` includes."""
    if importlib.util.find_spec("flair") is None:
        pytest.skip("flair is not installed (pip install -e '.[flair]')")
    out = run_python(FLAIR.format(options=OPTIONS, weights=WEIGHTS))
    assert out.strip().splitlines()[-1] == "96 32 (5, 32)"
