"""examples/web/: the browser page runs an exported ONNX graph in onnxruntime-web, in headless
Chromium, and its vectors are :class:`Embedder`'s (within 1e-5: WebAssembly's float32 kernels
round differently). The folder is served on 127.0.0.1 as its README says, once without
cross-origin isolation (one thread) and once with the COOP/COEP headers (threads).

Needs Chromium (Debian's ``chromium``; ``$CHROMIUM`` names another binary) and onnxruntime-web
(``npm install`` in examples/web, or npm to install it into a temporary folder); skipped, saying
which is missing, without them. Slow (a browser, WebAssembly compiled on the page): CI's slow
pass runs it. The character ids the page and the Node.js client share (``elmo-chars.mjs``) are
checked in the default run, with Node.js alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import pytest
from conftest import load_fixture_model

from elmo import Embedder
from elmo.inference.onnx_export import onnx_char_ids

WEB = Path(__file__).resolve().parent.parent / "examples" / "web"
RUNTIME = Path("node_modules") / "onnxruntime-web" / "dist" / "ort.wasm.min.mjs"
FIRST = "He sat on the river bank and watched the boats ."
SECOND = "She paid the cheque into her account at the bank ."
ISOLATION = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp"}


@pytest.fixture(scope="module")
def browser() -> str:
    """Chromium's binary (asked for first: without it, nothing else is installed or exported)."""
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    pytest.skip("no Chromium to drive the page (Debian: apt-get install chromium; or set $CHROMIUM)")


@pytest.fixture(scope="module")
def node_modules(tmp_path_factory) -> Path:
    """examples/web/node_modules if onnxruntime-web is installed there, else a temporary install."""
    if (WEB / RUNTIME).is_file():
        return WEB / "node_modules"
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("onnxruntime-web is not installed in examples/web and there is no npm to install it")
    folder = tmp_path_factory.mktemp("web-npm")
    shutil.copy(WEB / "package.json", folder / "package.json")
    done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=folder,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not (folder / RUNTIME).is_file():
        pytest.skip(f"npm could not install onnxruntime-web: {(done.stderr or done.stdout).strip()[-300:]}")
    return folder / "node_modules"


@pytest.fixture(scope="module")
def model_and_graph(tmp_path_factory):
    pytest.importorskip("onnx", reason="the [onnx] extra is not installed")
    from elmo.inference.onnx_export import export_onnx

    model = load_fixture_model("allennlp")
    path = tmp_path_factory.mktemp("web-model") / "elmo.onnx"
    export_onnx(model, path)  # state "warm", as Embedder's default
    return model, path


class Handler(SimpleHTTPRequestHandler):
    """The page's folder, its node_modules from wherever they are, the graph at /elmo.onnx, and
    POST /result for the page's report. ``headers``: added to every answer."""

    def __init__(self, *args, node_modules: Path, graph: Path, headers: dict, results: list, **kwargs):
        self.node_modules, self.graph, self.extra, self.results = node_modules, graph, headers, results
        super().__init__(*args, directory=str(WEB), **kwargs)

    def translate_path(self, path):
        clean = path.split("?", 1)[0]
        if clean == "/elmo.onnx":
            return str(self.graph)
        if clean.startswith("/node_modules/"):
            return str(self.node_modules / clean[len("/node_modules/"):])
        return super().translate_path(path)

    def end_headers(self):
        for key, value in self.extra.items():
            self.send_header(key, value)
        super().end_headers()

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.results.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def run_page(browser: str, node_modules: Path, graph: Path, headers: dict, profile: Path) -> dict:
    results: list[dict] = []
    handler = partial(Handler, node_modules=node_modules, graph=graph, headers=headers, results=results)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    query = urlencode({"model": "elmo.onnx", "first": FIRST, "second": SECOND, "word": "bank", "auto": "1",
                       "report": "/result"})
    url = f"http://127.0.0.1:{server.server_address[1]}/index.html?{query}"
    process = subprocess.Popen([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                "--disable-extensions", f"--user-data-dir={profile}", url],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1800):  # 180 s at most
            if results or process.poll() is not None:
                break
            threading.Event().wait(0.1)
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        server.shutdown()
        server.server_close()
    assert results, f"the page reported nothing; Chromium said: {process.stderr.read()[-2000:]}"
    return results[0]


@pytest.mark.slow
@pytest.mark.parametrize("isolated", [False, True], ids=["one-thread", "cross-origin-isolated"])
def test_the_page_gives_embedders_vectors(browser, node_modules, model_and_graph, tmp_path, isolated):
    model, graph = model_and_graph
    result = run_page(browser, node_modules, graph, ISOLATION if isolated else {}, tmp_path / "profile")
    assert "error" not in result, result
    assert result["crossOriginIsolated"] is isolated
    assert (result["threads"] > 1) is isolated or os.cpu_count() == 1
    embedder = Embedder(model)
    first, second = FIRST.split(), SECOND.split()
    assert result["sentences"] == [first, second] and result["where"] == [first.index("bank"), second.index("bank")]
    want = [embedder.embed_sentence(first, layers="all"), embedder.embed_sentence(second, layers="all")]
    for got, expected in zip(result["vectors"], want):
        got = np.asarray(got, dtype=np.float32)
        assert got.shape == expected.shape
        assert np.abs(got - expected).max() <= 1e-5
    # ELMo's point, as the page shows it: the token layer is context-free, the LSTM layers not.
    a, b = want[0][:, result["where"][0]], want[1][:, result["where"][1]]
    cosines = [float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)) for x, y in zip(a, b)]
    np.testing.assert_allclose(result["cosines"], cosines, atol=1e-5)
    assert abs(result["cosines"][0] - 1) < 1e-6 and max(result["cosines"][1:]) < 0.999


def test_the_javascript_character_ids_are_the_graphs_input():
    """elmo-chars.mjs builds what onnx_char_ids builds: bytes cut at 48 (inside a character),
    non-ASCII, the literal markers, sentences of different lengths in one batch."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("no Node.js to run elmo-chars.mjs")
    sentences = [["The", "café", "<S>", "x" * 47 + "é", "</S>", "日本語"], ["a"], ["Zürich", "."]]
    script = ("import { charIds, tokenize } from " + json.dumps((WEB / "elmo-chars.mjs").as_uri()) + ";"
              "const s = JSON.parse(process.argv[1]); const { data, dims } = charIds(s);"
              "console.log(JSON.stringify({ dims, data: Array.from(data, Number),"
              " tokens: tokenize('  a\\tb  c\\n') }));")
    done = subprocess.run([node, "--input-type=module", "-e", script, json.dumps(sentences)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    want = onnx_char_ids(sentences)
    assert got["dims"] == list(want.shape)
    assert np.array_equal(np.array(got["data"]).reshape(want.shape), want)
    assert got["tokens"] == ["a", "b", "c"]
