"""The Ray Data integration on a local Ray cluster (CPU): the vectors equal ``elmo embed``'s, and
the example writes Parquet. Skipped where Ray is not installed (``pip install -e ".[ray]"``)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from conftest import ALLENNLP, FIXTURE_MODEL_ARGS, corpus, write_lines

from elmo import open_embeddings
from elmo.cli.main import main
from elmo.integrations.ray import RayEmbedder

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

FIXTURE = {"options": str(ALLENNLP / "options.json"), "weights": str(ALLENNLP / "lm_weights.hdf5")}


@pytest.fixture(scope="module")
def cluster():
    """One small local cluster for the module: starting Ray takes seconds."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    yield
    ray.shutdown()


def elmo_embed(tmp_path, lines, layers):
    src = write_lines(tmp_path / "in.txt", lines)
    out = tmp_path / f"{layers}.hdf5"
    assert main(["embed", str(src), str(out), *FIXTURE_MODEL_ARGS, "--layers", layers]) == 0
    with open_embeddings(out) as vectors:
        return list(vectors)


@pytest.mark.parametrize("layers", ["top", "all"])
def test_vectors_equal_elmo_embed(cluster, tmp_path, layers):
    lines = corpus(30, seed=10)
    expected = elmo_embed(tmp_path, lines, layers)
    dataset = ray.data.from_items([{"line": i, "text": line} for i, line in enumerate(lines)])
    embedded = dataset.map_batches(RayEmbedder, fn_constructor_kwargs={**FIXTURE, "layers": layers},
                                   concurrency=2, num_cpus=1, batch_size=7)
    rows = sorted(embedded.take_all(), key=lambda row: row["line"])
    assert [row["text"] for row in rows] == lines
    for row, want in zip(rows, expected):
        assert row["n_tokens"] == want.shape[-2]
        assert row["embeddings"].shape == want.shape and row["embeddings"].dtype == np.float32
        # Other batches than elmo embed's: equal to float rounding (the warm policy is batch-independent).
        np.testing.assert_allclose(row["embeddings"], want, rtol=0, atol=1e-6)


@pytest.mark.slow  # CI runs it in its slow pass
def test_example_writes_parquet(cluster, tmp_path, bilm_dir):
    lines = corpus(20, seed=11)
    expected = elmo_embed(tmp_path, lines, "top")
    spec = importlib.util.spec_from_file_location("ray_embed", Path(__file__).parent.parent / "examples" / "ray_embed.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    # Two actors of one CPU on a cluster of two CPUs: no CPU left for reading or writing tasks.
    example.main([str(tmp_path / "in.txt"), str(tmp_path / "parquet"), "--model", str(bilm_dir),
                  "--concurrency", "2", "--num-cpus", "1", "--batch-size", "8", "--dtype", "float16"])
    assert any(p.suffix == ".parquet" for p in (tmp_path / "parquet").iterdir())
    rows = sorted(ray.data.read_parquet(str(tmp_path / "parquet")).take_all(), key=lambda row: row["line"])
    assert [row["line"] for row in rows] == list(range(20))  # empty lines kept: row n is line n
    assert [row["text"] for row in rows] == lines
    for row, want in zip(rows, expected):
        assert row["embeddings"].dtype == np.float16
        np.testing.assert_allclose(row["embeddings"], want.astype(np.float16), rtol=1e-3, atol=1e-3)


def test_refusals_name_the_fix():
    with pytest.raises(ValueError, match="stateful policy.*no fixed order.*'warm'"):
        RayEmbedder(**FIXTURE, state="stateful")
    embedder = RayEmbedder(**FIXTURE)
    with pytest.raises(KeyError, match="no column 'text'.*columns: sentence.*text_column="):
        embedder({"sentence": np.array(["a b"])})
    out = embedder({"text": np.array(["a b c", ""], dtype=object)})
    assert out["embeddings"][0].shape == (3, 32) and out["embeddings"][1].shape == (0, 32)
    assert out["n_tokens"].tolist() == [3, 0]
