"""One reader per format, each under one battery.

JSON: every JSON document ``src/`` reads goes through :mod:`elmo.jsonio` (a scan of the source
holds it), bounded in size, depth and numbers; each of elmo's state files is checked against its
small schema by the reader registered in :data:`STATE_FILES`: a cache that fails is ignored with
one warning line, a run's file that fails is refused naming the file (and field). A new state
file joins the battery by being registered there.
"""

from __future__ import annotations

import ast
import json
import os
import warnings
from pathlib import Path

import pytest

from elmo import jsonio
from elmo.jsonio import JSONFileError

SRC = Path(__file__).resolve().parent.parent / "src" / "elmo"

# Modules that may parse JSON themselves, and why. Nothing else in src/ may.
JSON_PARSERS_ALLOWED = {
    "jsonio.py": "the one reader",
    "serve/protocol.py": "the server's request bodies: their own bounded parser, answering 400s",
    "serve/worker.py": "messages from the worker's own parent process over a pipe, not a file",
}
JSON_PARSE_CALLS = {("json", "load"), ("json", "loads"), ("orjson", "loads"), ("ujson", "loads"), ("ujson", "load")}


def json_parse_calls(path: Path) -> list[str]:
    """Each ``json.load``/``json.loads``/``orjson.loads`` (called, or imported by name) in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and (node.value.id, node.attr) in JSON_PARSE_CALLS):
            found.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value.id}.{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module in {"json", "orjson", "ujson"}:
            found += [f"{path.relative_to(SRC)}:{node.lineno}: from {node.module} import {a.name}"
                      for a in node.names if (node.module, a.name) in JSON_PARSE_CALLS]
    return found


def test_every_json_read_goes_through_the_one_reader():
    found = [hit for path in sorted(SRC.rglob("*.py"))
             if path.relative_to(SRC).as_posix() not in JSON_PARSERS_ALLOWED for hit in json_parse_calls(path)]
    assert found == [], "parse JSON with elmo.jsonio.read_json/loads (bounded), not:\n" + "\n".join(found)


def test_the_scan_finds_what_it_looks_for(tmp_path):
    """The scan is not vacuous: it sees each form a parse can take."""
    code = tmp_path / "m.py"
    code.write_text("import json, orjson\nfrom json import loads\njson.load(f)\norjson.loads(b)\n")
    saved = globals()["SRC"]
    globals()["SRC"] = tmp_path
    try:
        assert len(json_parse_calls(code)) == 3
    finally:
        globals()["SRC"] = saved


# ------------------------------------------------------------------------------------- the reader
HOSTILE_DOCUMENTS = {
    "deep": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "deep object": ('{"a":' * 100_000 + "1" + "}" * 100_000, "nested too deeply"),
    "1e400": ('{"size": 1e400}', "not finite"),
    "-1e400": ("[-1e400]", "not finite"),
    "5,000 digits": ('{"size": ' + "9" * 5000 + "}", "5,000 characters"),
    "long float": ("[0." + "1" * 5000 + "]", "5,002 characters"),
    "NaN": ('{"x": NaN}', "NaN is not a JSON number"),
    "Infinity": ("[Infinity]", "Infinity is not a JSON number"),
    "truncated": ('{"format": "elmo", "fingerprint": {', "cut short"),
    "not JSON": ("hello", "not valid JSON (line 1, column 1)"),
    "empty": ("", "not valid JSON"),
}


@pytest.mark.parametrize("name", HOSTILE_DOCUMENTS)
def test_the_reader_refuses_hostile_documents_naming_the_file(tmp_path, name):
    text, words = HOSTILE_DOCUMENTS[name]
    path = tmp_path / "state.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(JSONFileError) as error:
        jsonio.read_json(path, max_bytes=1 << 21)
    assert str(error.value).startswith(f"{path}: ") and words in str(error.value), error.value
    assert "\n" not in str(error.value)


def test_the_reader_refuses_what_is_not_utf8_with_its_line(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{\n"name": "caf\xe9"}')
    with pytest.raises(JSONFileError, match=r"latin1\.json: not valid UTF-8 \(invalid continuation byte") as error:
        jsonio.read_json(path)
    assert error.value.line == 2


def test_a_large_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """200 MB (sparse here, so that the test writes nothing) is refused by its size alone."""
    path = tmp_path / "padded.json"
    with open(path, "wb") as f:
        f.write(b'{"a": 1}')
        f.truncate(200 << 20)
    reads = []
    real_open = open

    def recording_open(*args, **kwargs):
        handle = real_open(*args, **kwargs)
        real_read = handle.read
        handle = _Wrapped(handle, lambda size=-1: reads.append(size) or real_read(size))
        return handle

    monkeypatch.setattr("builtins.open", recording_open)
    with pytest.raises(JSONFileError, match=r"padded\.json: 209,715,200 bytes, larger than 1,048,576"):
        jsonio.read_json(path)
    assert reads == []


class _Wrapped:
    def __init__(self, handle, read):
        self._handle, self.read = handle, read

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()


def test_a_stream_is_read_only_to_its_bound():
    """A device (no size to check first) is read to the bound and no further: /dev/zero ends."""
    with pytest.raises(JSONFileError, match="larger than 1,024 bytes"):
        jsonio.read_json("/dev/zero", max_bytes=1024)


def test_what_the_reader_keeps():
    assert jsonio.loads('{"a": [1, 2.5, "x\\"[", {"b": null}], "c": true}', "x") == {
        "a": [1, 2.5, 'x"[', {"b": None}], "c": True}
    assert jsonio.loads('"[[[[[[' + "[" * 100 + '"', "x").startswith("[[[")  # brackets in strings do not nest
    assert jsonio.loads("[" * 64 + "]" * 64, "x") == eval("[" * 64 + "]" * 64)
    assert jsonio.loads("1.7976931348623157e308", "x") == 1.7976931348623157e308


def test_a_field_is_checked_and_named():
    doc = {"size": True, "seed": 3, "rate": 1, "name": None}
    with pytest.raises(JSONFileError, match=r"^f\.json: the field 'size' must be an integer, not true or false$"):
        jsonio.field(doc, "size", int, "f.json")
    with pytest.raises(JSONFileError, match=r"^f\.json: the field 'gone' is missing$"):
        jsonio.field(doc, "gone", int, "f.json")
    with pytest.raises(JSONFileError, match=r"^f\.json: not a JSON object but an array$"):
        jsonio.field([1], "size", int, "f.json")
    assert jsonio.field(doc, "rate", float, "f.json") == 1 and jsonio.field(doc, "seed", int, "f.json") == 3
    assert jsonio.field(doc, "gone", int, "f.json", required=False, default=7) == 7


# ------------------------------------------------------------------------------- the state files
def _precision(tmp_path, text):
    from elmo.inference.precision import read_precision_record
    path = tmp_path / "precision.json"
    _write(path, text)
    return lambda: read_precision_record(path), path


def _work(tmp_path, text):
    from elmo.inference.journal import WorkFolder
    work = WorkFolder(tmp_path / "out.hdf5")
    os.makedirs(work.path)
    _write(Path(work.info_path), text)
    return work.read_info, Path(work.info_path)


def _settings(tmp_path, text):
    from elmo.training.resume import SETTINGS_FILE, read_settings
    _write(tmp_path / SETTINGS_FILE, text)
    return lambda: read_settings(str(tmp_path)), tmp_path / SETTINGS_FILE


def _card_settings(tmp_path, text):
    from elmo.hub.card import RUN_SETTINGS_FILE, _run_settings
    _write(tmp_path / RUN_SETTINGS_FILE, text)
    return lambda: _run_settings(tmp_path), tmp_path / RUN_SETTINGS_FILE


def _sidecar(tmp_path, text):
    from elmo.hub.download import _read_record
    path = tmp_path / "model.tar.gz.sha256"
    _write(path, text)
    return lambda: _read_record(path), path


def _elmo_info(tmp_path, text):
    import h5py

    from elmo.inference.outputs import INFO_ATTR, file_info
    path = tmp_path / "out.hdf5"
    with h5py.File(path, "w") as f:
        f.attrs[INFO_ATTR] = text if isinstance(text, str) else text.decode("utf-8", "surrogateescape")
    return lambda: file_info(path), path


def _write(path: Path, text):
    if isinstance(text, int):  # a size: padded to it, sparse, after a valid start
        with open(path, "wb") as f:
            f.write(b"{}")
            f.truncate(text)
    else:
        path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)


DEEP = "[" * 100_000 + "]" * 100_000
SHA = "ab" * 32
GOOD_WORK = {"format": "elmo-embed-work", "version": 2, "fingerprint": {"model": "m"}}
# Each state file: its reader (writes the text, returns a call of elmo's own reader and the file's
# path), whether it is a cache (ignored with a warning) or a run's file (refused naming it), a good
# document (read as it is), and its hostile variants with a word the refusal must hold.
STATE_FILES = {
    "precision.json": (_precision, "cache", json.dumps({"cpu|k": {"float32": 0.01, "bfloat16": 0.02}}), {
        "deep": (DEEP, "nested too deeply"),
        "top level [1]": ("[1]", "not a JSON object"),
        "entry [1]": ('{"k": [1]}', "not a JSON object but an array"),
        "entry {}": ('{"k": {}}', "'float32' is missing"),
        "entry null": ('{"k": null}', "not a JSON object but null"),
        "entry strings": ('{"k": {"float32": "1", "bfloat16": 1}}', "'float32' must be a number"),
        "entry negative": ('{"k": {"float32": -1, "bfloat16": 1}}', "positive number"),
        "padded to 200 MB": (200 << 20, "larger than"),
        "not UTF-8": (b'{"k\xff": 1}', "not valid UTF-8"),
    }),
    "work.json": (_work, "run", json.dumps(GOOD_WORK), {
        **{f"fingerprint {kind}": (json.dumps({**GOOD_WORK, "fingerprint": value}),
                                   "the field 'fingerprint' must be an object")
           for kind, value in {"string": "x", "list": [1], "null": None, "number": 3}.items()},
        "no fingerprint": (json.dumps({"format": "elmo-embed-work", "version": 2}), "'fingerprint' is missing"),
        "deep": (DEEP, "nested too deeply"),
        "truncated": (json.dumps(GOOD_WORK)[:30], "not valid JSON"),
        "padded to 200 MB": (200 << 20, "larger than"),
        "a list": ("[1]", "not a JSON object"),
        "version a string": (json.dumps({**GOOD_WORK, "version": "2"}), "'version' must be an integer"),
    }),
    "train_settings.json": (_settings, "run", json.dumps({"train": ["a.txt"], "output": "run", "seed": 1}), {
        "deep": (DEEP, "nested too deeply"),
        "not UTF-8": (b'{"train": ["caf\xe9"]}', "not valid UTF-8"),
        "truncated": ('{"train": ["a.txt"], "outp', "not valid JSON"),
        "a list": ("[]", "not a JSON object"),
        "seed a string": ('{"seed": "1"}', "the field 'seed' must be an integer or null, not a string"),
        "max_tokens 1e400": ('{"max_tokens": 1e400}', "not finite"),
        "epochs a list": ('{"epochs": [1]}', "the field 'epochs' must be a number or null"),
    }),
    "train_settings.json (card)": (_card_settings, "run", json.dumps({"train": ["a.txt"], "init_from": None}), {
        "deep": (DEEP, "nested too deeply"),
        "not UTF-8": (b'{"train": ["caf\xe9"]}', "not valid UTF-8"),
        "truncated": ('{"train": ["a.txt"], "outp', "not valid JSON"),
        "init_from a number": ('{"init_from": 3}', "the field 'init_from' must be a string or null"),
    }),
    "download sidecar": (_sidecar, "cache", json.dumps({"sha256": SHA, "size": 3, "url": "u"}), {
        "deep": ("[" * 30_000 + "]" * 30_000, "nested too deeply"),  # within its 64 KiB
        "padded to 200 MB": (200 << 20, "larger than"),
        "size 1e400": (json.dumps({"sha256": SHA})[:-1] + ', "size": 1e400}', "not finite"),
        "size a float": (json.dumps({"sha256": SHA, "size": 3.5}), "'size' must be an integer"),
        "sha256 a list": (json.dumps({"sha256": [SHA], "size": 3}), "'sha256' must be a string"),
        "sha256 not hex": (json.dumps({"sha256": "x" * 64, "size": 3}), "not a SHA-256"),
        "size negative": (json.dumps({"sha256": SHA, "size": -1}), "not a SHA-256 and a size"),
        "no size": (json.dumps({"sha256": SHA}), "'size' is missing"),
    }),
    "elmo_info": (_elmo_info, "run", json.dumps({"sentences": 2, "tokens": 5, "token_shape": [3, 4]}), {
        "deep": (DEEP, "nested too deeply"),
        "a list": ("[1]", "not a JSON object but an array"),
        "without sentences": (json.dumps({"tokens": 5}), "'sentences' is missing"),
        "sentences a string": (json.dumps({"sentences": "2", "tokens": 5}), "'sentences' must be an integer"),
        "tokens negative": (json.dumps({"sentences": 2, "tokens": -5}), "'tokens' must be at least 0"),
        "token_shape of strings": (json.dumps({"sentences": 2, "tokens": 5, "token_shape": ["a"]}),
                                   "'token_shape' must be a list of counts"),
        "fingerprint a string": (json.dumps({"sentences": 2, "tokens": 5, "fingerprint": "x"}),
                                 "'fingerprint' must be an object"),
    }),
}
CASES = [(name, case) for name, (_, _, _, cases) in STATE_FILES.items() for case in cases]


@pytest.mark.parametrize("name", STATE_FILES)
def test_a_good_state_file_is_read(tmp_path, name):
    reader, kind, good, _ = STATE_FILES[name]
    read, _ = reader(tmp_path, good)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = read()
    assert value  # the reader returns what the file holds, not a fallback
    if isinstance(value, dict):
        assert value.items() >= json.loads(good).items()


@pytest.mark.parametrize("name, case", CASES)
def test_a_hostile_state_file_is_ignored_or_refused(tmp_path, name, case):
    reader, kind, _, cases = STATE_FILES[name]
    text, words = cases[case]
    read, path = reader(tmp_path, text)
    if kind == "cache" and name == "precision.json":  # a cache read in passing: ignored, one warning line
        with pytest.warns(UserWarning) as caught:
            assert read() == {}
        message = str(caught[0].message)
        assert len(caught) == 1 and str(path) in message and words in message and "\n" not in message, message
        return
    # A run's file (and the sidecar, whose caller turns this into a warning and a new download):
    # refused with one line naming the file.
    with pytest.raises(ValueError) as error:
        read()
    message = str(error.value)
    assert str(path) in message and words in message and "\n" not in message, message


# ------------------------------------------------------------------------------------------- HDF5
def spoil(path: Path, name: str, case: str) -> None:
    """Make the dataset ``name`` of the HDF5 file ``path`` hostile in the way ``case`` says."""
    import h5py
    import numpy as np

    with h5py.File(path, "r+") as f:
        data = f[name][...]
        del f[name]
        if case == "dangling soft link":
            f[name] = h5py.SoftLink("/nowhere")
        elif case == "soft link loop":
            f[name] = h5py.SoftLink(f"/{name}.loop")
            f[f"{name}.loop"] = h5py.SoftLink(f"/{name}")
        elif case == "external link to /etc/passwd":
            f[name] = h5py.ExternalLink("/etc/passwd", "/x")
        elif case == "external link to itself":
            f[name] = h5py.ExternalLink(str(path), f"/{name}")
        elif case == "user-defined link":
            _user_defined_link(f, name)
        elif case == "external raw storage":
            raw = path.with_name("outside.bin")
            raw.write_bytes(np.ascontiguousarray(data).tobytes())
            f.create_dataset(name, shape=data.shape, dtype=data.dtype, external=[(str(raw), 0, data.nbytes)])
        elif case == "virtual dataset":
            source = path.with_name("source.hdf5")
            with h5py.File(source, "w") as g:
                g["x"] = data
            layout = h5py.VirtualLayout(shape=data.shape, dtype=data.dtype)
            layout[...] = h5py.VirtualSource(str(source), "x", shape=data.shape)
            f.create_virtual_dataset(name, layout)
        elif case == "long double":
            f[name] = data.astype(np.longdouble)
        elif case == "booleans":
            f[name] = data > 0
        elif case == "NaN":
            data = data.astype(np.float32)
            data.flat[0] = np.nan
            f[name] = data
        elif case == "huge but finite":
            f[name] = np.full_like(data, 3e38, dtype=np.float32)
        elif case == "damaged chunk":
            f.create_dataset(name, data=data, chunks=data.shape, compression="gzip", fletcher32=True)
        else:  # pragma: no cover
            raise AssertionError(case)
    if case == "damaged chunk":
        with h5py.File(path, "r") as f:
            chunk = f[name].id.get_chunk_info(0)
        content = bytearray(path.read_bytes())
        content[chunk.byte_offset + chunk.size // 2] ^= 0xFF
        path.write_bytes(bytes(content))


def _user_defined_link(f, name: str) -> None:
    """A link of a class HDF5 does not know (id 77, registered here only): h5py has no call for
    one, so HDF5's own H5Lregister and H5Lcreate_ud are called from its library, through ctypes."""
    import ctypes
    import glob

    import h5py

    found = glob.glob(os.path.join(os.path.dirname(os.path.dirname(h5py.__file__)), "h5py.libs", "libhdf5-*.so*"))
    if not found:
        pytest.skip("a user-defined link is made through h5py's bundled libhdf5 (a manylinux wheel), absent here")
    lib = ctypes.CDLL(found[0])
    traverse = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_size_t,
                                ctypes.c_int64, ctypes.c_int64)

    class LinkClass(ctypes.Structure):  # H5L_class_t, version 1
        _fields_ = [("version", ctypes.c_int), ("id", ctypes.c_int), ("comment", ctypes.c_char_p),
                    ("create_func", ctypes.c_void_p), ("move_func", ctypes.c_void_p), ("copy_func", ctypes.c_void_p),
                    ("trav_func", traverse), ("del_func", ctypes.c_void_p), ("query_func", ctypes.c_void_p)]

    never = traverse(lambda *args: -1)
    _KEPT.append(never)  # HDF5 keeps the pointer for the process's life
    link_class = LinkClass(1, 77, b"a user-defined link for elmo's tests", None, None, None, never, None, None)
    assert lib.H5Lregister(ctypes.byref(link_class)) >= 0
    lib.H5Lcreate_ud.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_int64, ctypes.c_int64]
    assert lib.H5Lcreate_ud(f.id.id, name.encode(), 77, b"elsewhere", 9, 0, 0) >= 0


_KEPT: list = []


HDF5_CASES = {  # case: words the refusal holds besides the file and the dataset's name
    "dangling soft link": "soft link",
    "soft link loop": "soft link",
    "external link to /etc/passwd": "external link to /etc/passwd",
    "external link to itself": "external link",
    "user-defined link": "user-defined link (type 77)",
    "external raw storage": "other files",
    "virtual dataset": "virtual dataset",
    "long double": "floats of 128 bits",
    "booleans": "booleans",
    "NaN": "NaN",
    "huge but finite": "beyond 65504",
    "damaged chunk": "damaged",
}


def _weights_reader(tmp_path):
    import shutil

    from conftest import ALLENNLP

    from elmo.model.weights import load_bilm_tf
    path = tmp_path / "weights.hdf5"
    shutil.copy(ALLENNLP / "lm_weights.hdf5", path)
    return path, "CNN_proj/W_proj", lambda: load_bilm_tf(ALLENNLP / "options.json", path)


def _softmax_reader(tmp_path):
    import shutil

    import h5py
    from conftest import ALLENNLP

    from elmo.hub.checkpoints import load_softmax
    path = tmp_path / "softmax.hdf5"
    shutil.copy(ALLENNLP / "elmo_softmax_weights.hdf5", path)
    with h5py.File(path, "r") as f:
        vocab, dim = f["softmax/W"].shape
    return path, "softmax/W", lambda: load_softmax(path, vocab, dim)


def _vocab_cache_reader(tmp_path):
    from conftest import load_fixture_model

    from elmo.inference.vocab_cache import load_vocab_cache, save_vocab_cache
    model = load_fixture_model("allennlp")
    path = tmp_path / "cache.hdf5"
    save_vocab_cache(model, ["the", "cat", "sat"], path)
    return path, "embedding", lambda: load_vocab_cache(path, model)


def _archive_reader(tmp_path):
    """A zip's model.hdf5: spoiled in place, then zipped (the content-addressed case)."""
    import shutil
    import zipfile

    from conftest import ALLENNLP

    from elmo.hub.resolve import load_model
    path = tmp_path / "model.hdf5"
    shutil.copy(ALLENNLP / "lm_weights.hdf5", path)
    archive = tmp_path / "model.zip"

    def load():
        with zipfile.ZipFile(archive, "w") as z:
            z.write(ALLENNLP / "options.json", "options.json")
            z.write(path, "model.hdf5")
        return load_model(str(archive), cache_dir=tmp_path / "cache")
    return path, "CNN_proj/W_proj", load


# Each reader of model HDF5 files: (a good file's path, the dataset to spoil, the load).
HDF5_READERS = {"weights": _weights_reader, "softmax": _softmax_reader, "vocabulary cache": _vocab_cache_reader,
                "archive's model.hdf5": _archive_reader}


@pytest.mark.parametrize("reader", HDF5_READERS)
def test_a_good_model_file_loads(tmp_path, reader):
    _, _, load = HDF5_READERS[reader](tmp_path)
    assert load() is not None


@pytest.mark.parametrize("case", HDF5_CASES)
@pytest.mark.parametrize("reader", HDF5_READERS)
def test_a_hostile_model_file_is_refused_naming_file_and_dataset(tmp_path, reader, case):
    path, name, load = HDF5_READERS[reader](tmp_path)
    spoil(path, name, case)
    with pytest.raises(ValueError) as error:
        load()
    message = str(error.value)
    assert "\n" not in message and path.name in message and name in message, message
    assert HDF5_CASES[case] in message, message


def test_a_vocabulary_cache_may_hold_its_words_as_text(tmp_path):
    _, _, load = _vocab_cache_reader(tmp_path)
    assert sorted(load()) == ["cat", "sat", "the"]


def test_only_the_opener_opens_an_hdf5_file_to_read():
    """Every ``h5py.File(...)`` opened to read is in hdf5io, or in a module listed with its reason."""
    allowed = {"hdf5io.py": "the opener",
               "inference/outputs.py": "embeddings outputs, opened lazily per sentence (millions of datasets)"}
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).as_posix() in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "File"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "h5py"):
                mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"),
                                                                     None)
                if not (isinstance(mode, ast.Constant) and mode.value == "w"):
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == [], "open HDF5 files to read with elmo.hdf5io.open_hdf5, not:\n" + "\n".join(found)


# ------------------------------------------------------------------------------------- text lines
def _model_args():
    from conftest import FIXTURE_MODEL_ARGS
    return FIXTURE_MODEL_ARGS


# Every verb that reads text, with its arguments given the text file ("{text}") and a folder for
# its output ("{out}"): each must refuse a line past elmo embed's bound naming the file and line,
# found before the line is held. A new verb that reads text joins here.
TEXT_READERS = {
    "embed": lambda text, out: ["embed", text, f"{out}/o.hdf5", *_model_args()],
    "vocab": lambda text, out: ["vocab", text, "--output", f"{out}/vocab.txt"],
    "cache-vocab": lambda text, out: ["cache-vocab", text, f"{out}/cache.hdf5", *_model_args()],
    "neighbours --corpus": lambda text, out: ["neighbours", "the cat", "--word", "cat", "--corpus", text, "--no-progress",
                                              *_model_args()],
    "prepare": lambda text, out: ["prepare", text, "--output", f"{out}/prepared"],
    "evaluate --data": lambda text, out: ["evaluate", "default", "--data", text, "--no-progress"],
}
# Readers that take a stream (a device or pipe) as well as a regular file: /dev/zero, a file
# without a line break, must fail fast, not grow (it reached 14 and 17 GB in a minute).
STREAM_READERS = ("embed", "cache-vocab", "neighbours --corpus")  # prepare, vocab, evaluate take regular files only


def _long_line_file(path: Path, line: int = 2) -> Path:
    """A file whose line ``line`` is longer than the bound: zeros, sparse (nothing is written)."""
    from elmo.fileio import MAX_LINE_BYTES
    with open(path, "wb") as f:
        f.write(b"a few words\n" * (line - 1))
        f.truncate(f.tell() + MAX_LINE_BYTES + 10)
    return path


def _one_error_line(capsys) -> str:
    # On a CPU with bfloat16 instructions, embed's advice on --precision comes first (a long input
    # is what it looks for): advice, not an error.
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if not line.startswith("elmo embed: this CPU has")]
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("verb", TEXT_READERS)
def test_every_verb_refuses_a_line_past_the_bound_naming_file_and_line(tmp_path, capsys, verb):
    from elmo.cli.main import main
    text = _long_line_file(tmp_path / "long.txt")
    out = tmp_path / "out"
    out.mkdir()
    assert main(TEXT_READERS[verb](str(text), str(out))) == 2
    line = _one_error_line(capsys)
    assert f"{text}:2: the line is longer than 64,000,000 bytes" in line, line


@pytest.mark.parametrize("verb", STREAM_READERS)
def test_dev_zero_fails_fast(tmp_path, capsys, verb):
    import resource
    import time

    from elmo.cli.main import main
    out = tmp_path / "out"
    out.mkdir()
    started = time.perf_counter()
    assert main(TEXT_READERS[verb]("/dev/zero", str(out))) == 2
    line = _one_error_line(capsys)
    assert "/dev/zero:1: the line is longer than 64,000,000 bytes" in line, line
    assert time.perf_counter() - started < 30
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 4 << 20  # KiB: under 4 GiB, not 14-17 GB


def test_the_bound_is_elmo_embeds():
    from elmo.fileio import MAX_LINE_BYTES
    from elmo.inference.embed_file import MAX_BYTES_PER_TOKEN, MAX_LINE_TOKENS
    assert MAX_LINE_TOKENS * MAX_BYTES_PER_TOKEN == MAX_LINE_BYTES


def test_a_training_shard_with_a_line_past_the_bound_is_refused(tmp_path):
    """Shards are read whole (one decode, one split): the longest line is checked on the bytes."""
    from elmo.training.data import read_encoded
    shard = _long_line_file(tmp_path / "shard.txt", line=3)
    with pytest.raises(ValueError, match=rf"^{tmp_path}/shard\.txt:3: the line is longer than 64,000,000 bytes"):
        read_encoded(str(shard))


@pytest.mark.parametrize("info", ["[1]", '{"tokens": 5}', "[" * 100_000 + "]" * 100_000])
def test_embed_resume_refuses_an_output_whose_elmo_info_is_not_elmos(tmp_path, capsys, info):
    """A finished output's elmo_info deep, a list or without ``sentences`` gave a traceback on
    --resume; now one line naming the output and the field, and --force replaces the output."""
    import h5py
    from conftest import FIXTURE_MODEL_ARGS

    from elmo.cli.main import main
    from elmo.inference.outputs import INFO_ATTR
    text, out = tmp_path / "in.txt", tmp_path / "out.hdf5"
    text.write_text("the cat sat\na dog\n")
    argv = ["embed", str(text), str(out), *FIXTURE_MODEL_ARGS, "--resume"]
    assert main(argv) == 0
    with h5py.File(out, "r+") as f:
        f.attrs[INFO_ATTR] = info
    capsys.readouterr()
    assert main(argv) == 2
    line = _one_error_line(capsys)
    assert f"{out}: the attribute {INFO_ATTR}: " in line and "Traceback" not in line, line
    assert main([*argv, "--force"]) == 0
    with h5py.File(out, "r") as f:
        assert json.loads(f.attrs[INFO_ATTR])["sentences"] == 2
