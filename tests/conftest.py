import contextlib
import functools
import gzip
import http.server
import json
import os
import random
import sys
import tempfile
import threading
from pathlib import Path

import elmo  # noqa: F401  (first: it asks OpenMP for passive waiting before PyTorch loads, elmo.threads)
import h5py
import numpy as np
import pytest
import torch

import elmo.kernels.blocks as blocks_module
from elmo.model.weights import load_bilm_tf
from elmo.inference import journal
from elmo.model.config import BiLMConfig

# Tests never write into the user's cache (downloads, warm states): a throwaway one per run,
# inherited by the command-line tests' subprocesses.
os.environ["ELMO_CACHE"] = tempfile.mkdtemp(prefix="elmo-test-cache-")
# bfloat16 tests exercise the bfloat16 code path itself, whatever its speed on this CPU (tests of
# the timing check that may choose float32 instead switch it back on: test_precision.py).
os.environ["ELMO_BFLOAT16_CHECK"] = "0"

FIXTURES = Path(__file__).parent / "fixtures"
ALLENNLP = FIXTURES / "allennlp-elmo"
BILM_TF = FIXTURES / "bilm-tf" / "model"

# (folder, sentences file) of the two reference sets
FIXTURE_SETS = {
    "allennlp": (ALLENNLP, "sentences.json"),
    "bilm-tf": (BILM_TF, "lm_embeddings_sentences.json"),
}


def load_fixture_model(name: str):
    folder, _ = FIXTURE_SETS[name]
    return load_bilm_tf(folder / "options.json", folder / "lm_weights.hdf5").eval()


def fixture_batches(name: str):
    """The 10 reference batches: batch i = (sentences[0][i], sentences[1][i], sentences[2][i]),
    each a token list, with the expected (2, n_tokens, 16) top-layer array of each sentence."""
    folder, sentence_file = FIXTURE_SETS[name]
    sentences = json.loads((folder / sentence_file).read_text())
    expected = []
    for k in range(3):
        with h5py.File(folder / f"lm_embeddings_{k}.hdf5", "r") as f:
            expected.append([f[str(i)][...] for i in range(len(sentences[k]))])
    batches = []
    for i in range(len(sentences[0])):
        batches.append(([sentences[k][i].split() for k in range(3)], [expected[k][i] for k in range(3)]))
    return batches


def top_as_fixture(layers: np.ndarray, proj: int = 16) -> np.ndarray:
    """(L+1, n, 2*proj) activations -> the fixture's (2, n, proj) [forward top, backward top]."""
    top = layers[-1]
    return np.stack([top[:, :proj], top[:, proj:]])


@pytest.fixture(scope="session")
def allennlp_model():
    return load_fixture_model("allennlp")


def load_experiment(name: str):
    """The module of ``experiments/<name>.py`` (experiments are scripts, not an importable package;
    ``name`` may name a file in a folder of them, ``"probes_lib/wsd"``). It is registered in
    ``sys.modules`` under its dotted name, as dataclasses need."""
    import importlib.util
    import sys

    dotted = name.replace("/", ".")
    spec = importlib.util.spec_from_file_location(dotted, Path(__file__).parent.parent / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[dotted] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def bilm_dir(tmp_path_factory):
    """A model folder (options.json + weights.hdf5) holding the AllenNLP fixture biLM, for task
    configs' ``bilm.model``. Shared by the session: nothing may write into it."""
    import shutil

    folder = tmp_path_factory.mktemp("bilm")
    shutil.copy(ALLENNLP / "options.json", folder / "options.json")
    shutil.copy(ALLENNLP / "lm_weights.hdf5", folder / "weights.hdf5")
    return folder


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a directory, records the paths of GET requests, and keeps quiet."""

    requests: list[str]

    def do_GET(self):
        self.requests.append(self.path)
        if self.path == "/truncated":  # announces more bytes than it sends
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"x" * 10)
            return
        super().do_GET()

    def log_message(self, format, *args):
        pass


@contextlib.contextmanager
def serve_directory(directory):
    """An HTTP server on 127.0.0.1 serving ``directory``: yields ``(base_url, requests)``."""
    requests: list[str] = []
    handler = type("Handler", (CountingHandler,), {"requests": requests})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(directory)))
    # A short poll interval: the default 0.5 s makes every shutdown wait half a second.
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", requests
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def bfloat16_selected(monkeypatch):
    """Make ``precision="bfloat16"`` really run bfloat16 on this CPU: without AVX-512 BF16 or AMX
    (or where it measures slower) the runtime falls back to float32, which a test of bfloat16's
    own behaviour must not silently get."""
    import elmo.inference.precision

    monkeypatch.setattr(elmo.inference.precision, "cpu_has_bfloat16", lambda: True)
    monkeypatch.setenv(elmo.inference.precision.BFLOAT16_CHECK_ENV, "0")


# ------------------------------------------------ small models and texts the model tests share
SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], [], ["the", "the", "THE", "cat"], ["x" * 70]]


def make_config(n_layers=2, skip=True, activation="relu", filters=((1, 4), (2, 8), (3, 8)), n_highway=1):
    return BiLMConfig.from_dict({
        "lstm": {"dim": 24, "projection_dim": 12, "n_layers": n_layers, "cell_clip": 3, "proj_clip": 3,
                 "use_skip_connections": skip},
        "char_cnn": {"embedding": {"dim": 4}, "filters": [list(f) for f in filters], "n_highway": n_highway,
                     "activation": activation, "n_characters": 262, "max_characters_per_token": 50}})


TEXT = [s.split() for s in [
    "The committee will meet again next week to discuss the proposal .",
    "It rained .", "", "東京 は 日本 の 首都 です 🍕",
    "a " * 60, "prices rose by 3 percent in the first quarter , according to the report .",
    "x" * 80 + " é" * 5, "The the THE the",
]]


@pytest.fixture(params=["bmm", "onednn"])
def product_kernel(request, monkeypatch):
    """Runs a test with each kernel of the CPU's float32 products (elmo.kernels.blocks.linear):
    oneDNN's linear (the default where PyTorch has it) and PyTorch's own batched products (a
    PyTorch without oneDNN, and the GPU's branch)."""
    if request.param == "onednn":
        if not blocks_module.onednn_for("cpu", torch.float32):
            pytest.skip("this PyTorch has no oneDNN linear kernel")
        monkeypatch.setattr(blocks_module, "ONEDNN", True)
    else:
        monkeypatch.setattr(blocks_module, "ONEDNN", False)
    return request.param


# Sentences past two gate chunks, mixed with short and empty ones; the last batch spans two row
# blocks of the inference kernel (elmo.kernels.blocks.row_block).
LONG_LENGTHS = [[300, 17], [300, 300, 257, 129, 128, 40, 1, 0],
                [260, 200, 150, 129, 128, 127, 100, 90, 80, 64, 63, 40, 33, 32, 31, 20, 17, 16, 15, 9, 5, 2, 1, 0]]


# ------------------------------------------------ corpora and checks the embedding tests share
EMBED_CLI = [sys.executable, "-m", "elmo.cli.main", "embed"]


FIXTURE_MODEL_ARGS = ["--options", str(ALLENNLP / "options.json"), "--weights", str(ALLENNLP / "lm_weights.hdf5")]


EMBED_WORDS = ("the cat sat on mat . , bank river raised rates we and of to in is was naïve café über "
         "Zürich 東京 a-b 3.14 'quoted' (x)").split()


def corpus(n: int, seed: int = 0, longest: int = 25) -> list[str]:
    """``n`` lines of varied length, with empty lines and repeats."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(EMBED_WORDS) for _ in range(rng.randint(0, longest))) for _ in range(n)]
    for i in range(0, n, 17):
        lines[i] = lines[i // 2]  # repeated lines
    return lines


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def assert_same(a, b, exact=True):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.shape == y.shape, i
        if exact:
            assert np.array_equal(x, y), f"sentence {i} differs"
        else:
            np.testing.assert_allclose(x, y, rtol=0, atol=1e-6, err_msg=f"sentence {i}")


def assert_gradients_close(got, expected, params, rtol, atol):
    """The gradients of ``got`` and ``expected`` (tensors of one shape, computed from ``params``)
    under one random weighting of their elements agree to ``rtol`` / ``atol``."""
    weight = torch.randn_like(expected)
    for a, b in zip(torch.autograd.grad((got * weight).sum(), params),
                    torch.autograd.grad((expected * weight).sum(), params)):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


class Interrupt(Exception):
    pass


def interrupt_after(monkeypatch, frames: int):
    """Make the journal stop (as a kill would) once ``frames`` batches are in it."""
    original = journal.JournalAppender.append
    count = [0]

    def append(self, **kwargs):
        if count[0] == frames:
            raise Interrupt
        count[0] += 1
        return original(self, **kwargs)

    monkeypatch.setattr(journal.JournalAppender, "append", append)


# ------------------------------------------------------------------ hostile archives, measured
# Loads an archive in a fresh process whose files may not grow past a limit (RLIMIT_FSIZE: a write
# past it fails with EFBIG instead of killing the process) and reports the error and how far the
# load raised the process's peak resident memory. A genuine model is loaded first, into another
# cache, so that every module and allocator pool is already in place when the peak is read.
BOUNDED_LOAD = r"""
import json, os, resource, signal, sys
import elmo.hub.archives as archives
from elmo.hub import load_model
warm, archive, margin, fsize, cache = sys.argv[1:6]
archives.BOUND_MARGIN = int(margin)
os.environ["ELMO_CACHE"] = cache + "-warm"
load_model(warm)
os.environ["ELMO_CACHE"] = cache
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(fsize), int(fsize)))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load_model(archive)
    error = None
except Exception as e:
    error = f"{type(e).__name__}: {e}"
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"error": error, "peak_growth": (after - before) * 1024}))
"""


def bounded_load(warm, archive, cache, margin: int, fsize: int) -> dict:
    """``{"error": ..., "peak_growth": bytes}`` of loading ``archive`` as :data:`BOUNDED_LOAD` does,
    with ``archives.BOUND_MARGIN`` set to ``margin`` and files limited to ``fsize`` bytes."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", BOUNDED_LOAD, str(warm), str(archive), str(margin), str(fsize),
                           str(cache)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def zip_with_bomb(path, members: dict, name: str, head: bytes, size: int):
    """A zip of ``members`` plus member ``name``: ``head`` then zeros, ``size`` bytes in all
    (deflated to about a thousandth of that), streamed so the test never holds it whole."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in members.items():
            z.writestr(member, data)
        with z.open(name, "w", force_zip64=True) as f:
            f.write(head)
            left = size - len(head)
            while left:
                f.write(bytes(min(left, 2**20)))
                left -= min(left, 2**20)
    return path


def cache_files(cache) -> list[str]:
    """Everything under a cache folder, folders included (a refusal must leave none of it)."""
    cache = Path(cache)
    return sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*")) if cache.exists() else []


def damaged_gzips(folder):
    """``{kind: path}``: a truncated .gz (a download cut short), one with corrupt deflate data,
    one whose checksum fails, and a file named .gz that is not gzip; each of 2,000 lines."""
    data = gzip.compress("".join(f"line {i} of a corpus\n" for i in range(2000)).encode(), mtime=0)
    middle = len(data) // 2
    corrupt = bytearray(data)
    corrupt[middle:middle + 64] = bytes(64)  # a run of zeros inside the deflate stream
    checksum = bytearray(data)
    checksum[-8] ^= 0xFF  # the CRC-32 in the trailer
    paths = {}
    for kind, content in (("truncated", data[:middle]), ("corrupt", bytes(corrupt)), ("checksum", bytes(checksum)),
                          ("not-gzip", b"plain text\n" * 10)):
        paths[kind] = folder / f"{kind}.txt.gz"
        paths[kind].write_bytes(content)
    return paths
