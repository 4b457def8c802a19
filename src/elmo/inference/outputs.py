"""Files of embeddings: the layouts ``elmo embed`` writes and one reader for all of them.

Two layouts, both HDF5:

* ``"allennlp"`` (the default, for compatibility): the ``allennlp elmo`` command's layout. One
  dataset per input line, named by its index (``"0"``, ``"1"``, ...), shaped ``(layers, tokens,
  dim)`` (``--layers all``) or ``(tokens, dim)`` (``top``, ``average``), plus ``sentence_to_index``,
  a one-element string dataset holding a JSON object from line text to index. Fine for thousands of
  sentences; at millions, a dataset per sentence makes the file slow to open and to write.
* ``"packed"``: made for millions of sentences. One chunked array ``vectors`` shaped ``(tokens,
  layers, dim)`` (or ``(tokens, dim)``) holding every token of every sentence in input order,
  ``offsets`` ``(sentences + 1,)`` (sentence ``i`` is ``vectors[offsets[i]:offsets[i+1]]``), and
  the lines' text as UTF-8 bytes ``text`` with ``text_offsets``.

Either stores float32 or float16 (``dtype``), optionally compressed (``"gzip"`` or ``"lzf"``,
with HDF5's byte shuffle, which is what makes floats compress at all). A sharded run (one process
per rank) writes a folder of shard files, ``shard-RRRRR-of-WWWWW.hdf5``, each holding the lines
whose 0-based number ``n`` has ``n % W == R``, and a ``manifest.json``.

:func:`open_embeddings` opens a file of either layout, a shard folder, or a list of files, as one
lazy sequence of arrays by sentence index, shaped as :meth:`elmo.Embedder.embed_sentences` returns
them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import h5py
import numpy as np

from elmo import jsonio

LAYOUTS = ("allennlp", "packed")
DEFAULT_LAYOUT = "allennlp"
DTYPES = {"float32": np.float32, "float16": np.float16}
DEFAULT_DTYPE = "float32"
COMPRESSIONS = ("none", "gzip", "lzf")
DEFAULT_COMPRESSION = "none"
# The layers stored (and returned in memory) when none are named: all of them.
DEFAULT_LAYERS = "all"
GZIP_LEVEL = 4
LAYER_NAMES = ("all", "top", "average")

# Root attributes of a file we write (invisible to readers that look only at datasets).
LAYOUT_ATTR = "elmo_layout"
INFO_ATTR = "elmo_info"  # JSON: layers, dtype, model fingerprint, what the run was asked
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "elmo-embeddings-shards"

# About this many bytes per HDF5 chunk of the packed layout: small enough that reading one
# sentence reads little more than it, big enough for compression and few index entries.
CHUNK_BYTES = 512 * 1024
# Rows buffered before a write to the packed layout, in whole chunks, so that a compressed chunk
# is written once and never read back to be completed.
WRITE_BUFFER_BYTES = 16 << 20


@dataclass(frozen=True)
class OutputOptions:
    """How vectors are stored: ``layout`` (:data:`LAYOUTS`), ``layers`` (``"all"``, ``"top"``,
    ``"average"``, one layer index (0: the token layer; stored ``(tokens, dim)``) or a list of
    indices), ``dtype`` (``"float32"``, ``"float16"``) and
    ``compression`` (``"none"``, ``"gzip"``, ``"lzf"``)."""

    layout: str = DEFAULT_LAYOUT
    layers: str | int | tuple[int, ...] = DEFAULT_LAYERS
    dtype: str = DEFAULT_DTYPE
    compression: str = DEFAULT_COMPRESSION

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout: expected one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: expected one of {', '.join(DTYPES)}, got {self.dtype!r}")
        compression = "none" if self.compression is None else self.compression
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression: expected one of {', '.join(COMPRESSIONS)}, got {self.compression!r}")
        object.__setattr__(self, "compression", compression)
        if isinstance(self.layers, str):
            if self.layers not in LAYER_NAMES:
                raise ValueError(f"layers: expected 'all', 'top', 'average' or a list of indices, got {self.layers!r}")
        elif isinstance(self.layers, (int, np.integer)) and not isinstance(self.layers, bool):
            object.__setattr__(self, "layers", int(self.layers))
        else:
            object.__setattr__(self, "layers", tuple(int(i) for i in self.layers))

    def token_shape(self, n_layers: int, dim: int) -> tuple[int, ...]:
        """The shape of one token's stored vectors for a biLM with ``n_layers`` (L+1) layers."""
        if isinstance(self.layers, str):
            return (n_layers, dim) if self.layers == "all" else (dim,)
        if isinstance(self.layers, int):
            if not -n_layers <= self.layers < n_layers:
                raise ValueError(f"layers: index {self.layers} out of range; the biLM has {n_layers} layers")
            return (dim,)
        for i in self.layers:
            if not -n_layers <= i < n_layers:
                raise ValueError(f"layers: index {i} out of range; the biLM has {n_layers} layers")
        return (len(self.layers), dim)

    def select(self, token_major: np.ndarray) -> np.ndarray:
        """Pick the stored layers from ``(tokens, L+1, dim)`` activations and convert to the
        stored dtype: ``(tokens, layers, dim)`` or ``(tokens, dim)``, C-contiguous."""
        if isinstance(self.layers, str):
            if self.layers == "top":
                picked = token_major[:, -1]
            elif self.layers == "average":
                picked = token_major.mean(axis=1)
            else:
                picked = token_major
        elif isinstance(self.layers, int):
            picked = token_major[:, self.layers]
        else:
            picked = token_major[:, list(self.layers)]
        return np.ascontiguousarray(picked, dtype=DTYPES[self.dtype])

    def h5_filters(self) -> dict:
        if self.compression == "gzip":
            return {"compression": "gzip", "compression_opts": GZIP_LEVEL, "shuffle": True}
        if self.compression == "lzf":
            return {"compression": "lzf", "shuffle": True}
        return {}

    def describe(self) -> dict:
        return {"layout": self.layout,
                "layers": self.layers if isinstance(self.layers, (str, int)) else list(self.layers),
                "dtype": self.dtype, "compression": self.compression}


# ----------------------------------------------------------------------------------- writers
class LayoutWriter:
    """Writes sentences, in input order, into an open HDF5 file of one layout. Each sentence
    comes as pieces of ``(tokens, *token_shape)`` rows (a long sentence need not be held whole)."""

    def __init__(self, f: h5py.File, options: OutputOptions, token_shape: tuple[int, ...]):
        self.f, self.options, self.token_shape = f, options, token_shape
        self.dtype = np.dtype(DTYPES[options.dtype])
        self.sentences = 0
        self.tokens = 0

    def add(self, text: str, n_tokens: int, pieces: Iterable[np.ndarray]) -> None:
        raise NotImplementedError

    def finish(self, info: dict) -> None:
        """Write what comes after the last sentence, and the run's description."""
        self.f.attrs[LAYOUT_ATTR] = self.options.layout
        self.f.attrs[INFO_ATTR] = json.dumps({"format_version": FORMAT_VERSION, **self.options.describe(),
                                              "token_shape": list(self.token_shape), "sentences": self.sentences,
                                              "tokens": self.tokens, **info})


class AllenNLPWriter(LayoutWriter):
    """One dataset per sentence, ``(layers, tokens, dim)`` or ``(tokens, dim)``, and ``sentence_to_index``."""

    def __init__(self, f, options, token_shape):
        super().__init__(f, options, token_shape)
        self.sentence_to_index: dict[str, str] = {}

    def add(self, text, n_tokens, pieces):
        if len(self.token_shape) == 2:
            shape = (self.token_shape[0], n_tokens, self.token_shape[1])
        else:
            shape = (n_tokens, *self.token_shape)
        filters = self.options.h5_filters() if n_tokens > 0 else {}
        dataset = self.f.create_dataset(str(self.sentences), shape=shape, dtype=self.dtype, **filters)
        start = 0
        for piece in pieces:
            stop = start + len(piece)
            if len(self.token_shape) == 2:
                dataset[:, start:stop] = piece.transpose(1, 0, 2)
            else:
                dataset[start:stop] = piece
            start = stop
        if start != n_tokens:
            raise RuntimeError(f"sentence {self.sentences}: got {start} token vectors for {n_tokens} tokens")
        # Like allennlp elmo: a repeated line maps to its last index.
        self.sentence_to_index[text] = str(self.sentences)
        self.sentences += 1
        self.tokens += n_tokens

    def finish(self, info):
        dataset = self.f.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
        dataset[0] = json.dumps(self.sentence_to_index)
        super().finish(info)


def chunk_rows(row_bytes: int) -> int:
    return max(1, CHUNK_BYTES // max(1, row_bytes))


class PackedWriter(LayoutWriter):
    """``vectors`` ``(tokens, *token_shape)``, ``offsets``, ``text``, ``text_offsets``."""

    def __init__(self, f, options, token_shape):
        super().__init__(f, options, token_shape)
        row_bytes = int(np.prod(token_shape)) * self.dtype.itemsize
        self.rows_per_chunk = chunk_rows(row_bytes)
        filters = options.h5_filters()
        self.vectors = f.create_dataset("vectors", shape=(0, *token_shape), maxshape=(None, *token_shape),
                                        dtype=self.dtype, chunks=(self.rows_per_chunk, *token_shape), **filters)
        self.text = f.create_dataset("text", shape=(0,), maxshape=(None,), dtype=np.uint8, chunks=(1 << 16,),
                                     **filters)
        self.offsets = [0]
        self.text_offsets = [0]
        self.flush_rows = max(1, WRITE_BUFFER_BYTES // (row_bytes * self.rows_per_chunk)) * self.rows_per_chunk
        self._rows: list[np.ndarray] = []
        self._buffered = 0
        self._texts: list[bytes] = []
        self._text_written = 0

    def add(self, text, n_tokens, pieces):
        start = self.tokens
        for piece in pieces:
            if piece.shape[1:] != self.token_shape:
                raise RuntimeError(f"sentence {self.sentences}: vectors shaped {piece.shape[1:]}, "
                                   f"expected {self.token_shape}")
            self._rows.append(piece)
            self._buffered += len(piece)
            self.tokens += len(piece)
            if self._buffered >= self.flush_rows:
                self._flush_rows(whole_chunks=True)
        if self.tokens - start != n_tokens:
            raise RuntimeError(f"sentence {self.sentences}: got {self.tokens - start} token vectors for "
                               f"{n_tokens} tokens")
        encoded = text.encode("utf-8")
        self._texts.append(encoded)
        self.text_offsets.append(self.text_offsets[-1] + len(encoded))
        self.offsets.append(self.tokens)
        self.sentences += 1
        if self.text_offsets[-1] - self._text_written >= WRITE_BUFFER_BYTES:
            self._flush_text()

    def _flush_rows(self, whole_chunks: bool) -> None:
        if not self._rows:
            return
        rows = np.concatenate(self._rows) if len(self._rows) > 1 else self._rows[0]
        keep = len(rows) % self.rows_per_chunk if whole_chunks else 0
        write = rows[:len(rows) - keep]
        start = self.vectors.shape[0]
        self.vectors.resize(start + len(write), axis=0)
        self.vectors[start:] = write
        self._rows = [rows[len(rows) - keep:]] if keep else []
        self._buffered = keep

    def _flush_text(self) -> None:
        if not self._texts:
            return
        data = np.frombuffer(b"".join(self._texts), dtype=np.uint8)
        start = self.text.shape[0]
        self.text.resize(start + len(data), axis=0)
        self.text[start:] = data
        self._text_written += len(data)
        self._texts = []

    def finish(self, info):
        self._flush_rows(whole_chunks=False)
        self._flush_text()
        self.f.create_dataset("offsets", data=np.asarray(self.offsets, dtype=np.int64))
        self.f.create_dataset("text_offsets", data=np.asarray(self.text_offsets, dtype=np.int64))
        super().finish(info)


def create_writer(f: h5py.File, options: OutputOptions, token_shape: tuple[int, ...]) -> LayoutWriter:
    """The writer of ``options.layout`` over an HDF5 file open for writing."""
    return (PackedWriter if options.layout == "packed" else AllenNLPWriter)(f, options, token_shape)


def file_info(path: str | os.PathLike) -> dict | None:
    """The description a finished file of ours carries (see :meth:`LayoutWriter.finish`), or None
    for a file that is not one (or cannot be read)."""
    try:
        with h5py.File(path, "r") as f:
            raw = f.attrs.get(INFO_ATTR)
    except (OSError, ValueError):
        return None
    return None if raw is None else read_info(raw, os.fspath(path))


# The fields of the attribute elmo_info a reader relies on, with their JSON types (the rest is
# informative). Counts are whole numbers of at least 0; the token shape a list of them.
INFO_SCHEMA = {"sentences": (int,), "tokens": (int,), "token_shape": (list,), "fingerprint": (dict,),
               "layers": (list, int, str, type(None)), "format_version": (int,)}
INFO_REQUIRED = ("sentences", "tokens")


def read_info(raw: str | bytes, path: str) -> dict:
    """The attribute ``elmo_info`` of the finished file ``path`` (its JSON text ``raw``), checked
    against :data:`INFO_SCHEMA`; a :class:`elmo.jsonio.JSONFileError` (a ValueError) naming the file
    and the field when it is not elmo's."""
    source = f"{path}: the attribute {INFO_ATTR}"
    info = jsonio.loads(raw, source)
    for name, kinds in INFO_SCHEMA.items():
        value = jsonio.field(info, name, kinds, source, required=name in INFO_REQUIRED)
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise jsonio.JSONFileError(source, f"the field {name!r} must be at least 0, not {value}")
    shape = info.get("token_shape", [])
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise jsonio.JSONFileError(source, "the field 'token_shape' must be a list of counts")
    return info


# ------------------------------------------------------------------------------------ shards
def shard_name(rank: int, world: int) -> str:
    return f"shard-{rank:05d}-of-{world:05d}.hdf5"


def shard_lines(total: int, rank: int, world: int) -> int:
    """How many of ``total`` lines shard ``rank`` of ``world`` holds (line ``n`` goes to ``n % world``)."""
    return max(0, (total - rank + world - 1) // world)


def manifest_for(world: int, info: dict) -> dict:
    return {"format": MANIFEST_FORMAT, "version": FORMAT_VERSION, "world_size": world, "split": "round-robin",
            "rule": "line n (0-based) is sentence n // world_size of shard n % world_size",
            "shards": [shard_name(r, world) for r in range(world)], **info}


# ------------------------------------------------------------------------------------ reader
class Embeddings(Sequence):
    """A lazy, read-only sequence of per-sentence arrays, by sentence index (0-based line number).

    ``embeddings[i]`` reads sentence ``i`` from disk: ``(layers, tokens, dim)`` when all (or
    several) layers were stored, ``(tokens, dim)`` for ``top`` or ``average``, in the stored dtype.
    Iterating reads in order (and in large blocks for the packed layout). ``text(i)`` is the
    line's text. Open with :func:`open_embeddings`; close (or use as a context manager) to
    release the files.
    """

    dtype: np.dtype
    token_shape: tuple[int, ...]
    info: dict

    def __len__(self) -> int:
        raise NotImplementedError

    def _read(self, i: int) -> np.ndarray:
        raise NotImplementedError

    def text(self, i: int) -> str | None:
        """The text of line ``i`` (None where the layout cannot tell, see :class:`_AllenNLPFile`)."""
        raise NotImplementedError

    def n_tokens(self, i: int) -> int:
        return self._read(self._index(i)).shape[-2]

    def _index(self, i: int) -> int:
        n = len(self)
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"embeddings: index must be an integer or a slice, got {type(i).__name__}")
        if not -n <= i < n:
            raise IndexError(f"embeddings: sentence {i} out of range (0..{n - 1})")
        return int(i) % n if n else int(i)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._read(j) for j in range(*i.indices(len(self)))]
        return self._read(self._index(i))

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self._read(i)

    @property
    def layers(self):
        return self.info.get("layers")

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {len(self)} sentences, layers={self.layers!r}, "
                f"dtype={self.dtype}, token shape {self.token_shape}>")


def _token_major_to_sentence(rows: np.ndarray) -> np.ndarray:
    """``(tokens, layers, dim)`` -> ``(layers, tokens, dim)`` (a view); 2-d rows are returned as they are."""
    return rows.transpose(1, 0, 2) if rows.ndim == 3 else rows


class _PackedFile(Embeddings):
    # Sequential reads go through blocks of about this many bytes.
    BLOCK_BYTES = 32 << 20

    def __init__(self, path: str, f: h5py.File):
        self.path, self.f = path, f
        try:
            self.vectors = f["vectors"]
            self.offsets = f["offsets"][...]
            self._text = f["text"]
            self.text_offsets = f["text_offsets"][...]
        except KeyError as e:
            raise ValueError(f"{path}: a packed embeddings file without its {e.args[0]!r} dataset "
                             "(not written to the end?)") from None
        self.dtype = self.vectors.dtype
        self.token_shape = tuple(self.vectors.shape[1:])
        self.info = _info_of(f)

    def __len__(self):
        return len(self.offsets) - 1

    def _read(self, i):
        return _token_major_to_sentence(self.vectors[self.offsets[i]:self.offsets[i + 1]])

    def n_tokens(self, i):
        i = self._index(i)
        return int(self.offsets[i + 1] - self.offsets[i])

    def text(self, i):
        i = self._index(i)
        return bytes(self._text[self.text_offsets[i]:self.text_offsets[i + 1]]).decode("utf-8")

    def __iter__(self):
        row_bytes = max(1, int(np.prod(self.token_shape)) * self.dtype.itemsize)
        block_rows = max(1, self.BLOCK_BYTES // row_bytes)
        i, n = 0, len(self)
        while i < n:
            j = i + 1
            while j < n and self.offsets[j + 1] - self.offsets[i] <= block_rows:
                j += 1
            rows = self.vectors[self.offsets[i]:self.offsets[j]]
            for k in range(i, j):
                yield _token_major_to_sentence(rows[self.offsets[k] - self.offsets[i]:self.offsets[k + 1] - self.offsets[i]])
            i = j

    def close(self):
        self.f.close()


class _AllenNLPFile(Embeddings):
    """The ``allennlp elmo`` layout. ``text(i)`` comes from ``sentence_to_index``, which maps a
    repeated line only to its last index: the earlier copies' text is None."""

    def __init__(self, path: str, f: h5py.File):
        self.path, self.f = path, f
        names = [k for k in f.keys() if k != "sentence_to_index"]
        self._n = len(names)
        for k in names:
            if not k.isdigit() or int(k) >= self._n:
                raise ValueError(f"{path}: dataset {k!r} does not belong to the allennlp elmo layout "
                                 f"(expected datasets '0'..'{self._n - 1}' and 'sentence_to_index')")
        first = f["0"] if self._n else None
        self.dtype = first.dtype if first is not None else np.dtype(np.float32)
        self.info = _info_of(f)
        if "token_shape" in self.info:
            self.token_shape = tuple(self.info["token_shape"])
        elif first is not None:
            self.token_shape = (first.shape[0], first.shape[2]) if first.ndim == 3 else (first.shape[1],)
        else:
            self.token_shape = ()
        self._texts: list[str | None] | None = None

    def __len__(self):
        return self._n

    def _read(self, i):
        return self.f[str(i)][...]

    def n_tokens(self, i):
        return int(self.f[str(self._index(i))].shape[-2])

    def text(self, i):
        i = self._index(i)
        if self._texts is None:
            texts: list[str | None] = [None] * self._n
            if "sentence_to_index" in self.f:
                source = f"{self.path}: the dataset sentence_to_index"
                # Held whole already (one string in the file), so bounded by depth and numbers only.
                mapping = jsonio.loads(self.f["sentence_to_index"][0], source, max_bytes=None)
                if not isinstance(mapping, dict):
                    raise jsonio.JSONFileError(source, "not a JSON object of lines and their indices")
                for line, index in mapping.items():
                    if isinstance(index, (int, str)) and str(index).isdigit() and int(index) < self._n:
                        texts[int(index)] = line
            self._texts = texts
        return self._texts[i]

    def close(self):
        self.f.close()


class _Concatenation(Embeddings):
    """Several parts one after another (a list of files)."""

    def __init__(self, parts: list[Embeddings]):
        self.parts = parts
        first = parts[0]
        self.dtype, self.token_shape, self.info = first.dtype, first.token_shape, first.info
        for part in parts[1:]:
            if part.token_shape != first.token_shape or part.dtype != first.dtype:
                raise ValueError(f"{getattr(part, 'path', part)}: vectors {part.token_shape} {part.dtype} differ "
                                 f"from the first file's {first.token_shape} {first.dtype}")
        self.starts = np.cumsum([0] + [len(p) for p in parts])

    def __len__(self):
        return int(self.starts[-1])

    def _locate(self, i: int) -> tuple[Embeddings, int]:
        part = int(np.searchsorted(self.starts, i, side="right")) - 1
        return self.parts[part], i - int(self.starts[part])

    def _read(self, i):
        part, j = self._locate(i)
        return part[j]

    def text(self, i):
        part, j = self._locate(self._index(i))
        return part.text(j)

    def n_tokens(self, i):
        part, j = self._locate(self._index(i))
        return part.n_tokens(j)

    def __iter__(self):
        for part in self.parts:
            yield from part

    def close(self):
        for part in self.parts:
            part.close()


class _Shards(Embeddings):
    """The shards of a sharded run, interleaved back into input order: sentence ``n`` is sentence
    ``n // W`` of shard ``n % W``."""

    def __init__(self, folder: str, shards: list[Embeddings], info: dict):
        self.path, self.shards, self.info = folder, shards, info
        world = len(shards)
        self.dtype, self.token_shape = shards[0].dtype, shards[0].token_shape
        lengths = [len(s) for s in shards]
        total = sum(lengths)
        for rank, n in enumerate(lengths):
            if n != shard_lines(total, rank, world):
                raise ValueError(f"{folder}: shard {rank} holds {n} sentences, but {total} lines split over "
                                 f"{world} shards give it {shard_lines(total, rank, world)}: the shards are not "
                                 f"from one run over one input")
        self._n = total

    def __len__(self):
        return self._n

    def _read(self, i):
        world = len(self.shards)
        return self.shards[i % world][i // world]

    def text(self, i):
        i = self._index(i)
        return self.shards[i % len(self.shards)].text(i // len(self.shards))

    def n_tokens(self, i):
        i = self._index(i)
        return self.shards[i % len(self.shards)].n_tokens(i // len(self.shards))

    def __iter__(self):
        iterators = [iter(s) for s in self.shards]
        for i in range(self._n):
            yield next(iterators[i % len(iterators)])

    def close(self):
        for shard in self.shards:
            shard.close()


def _info_of(f: h5py.File) -> dict:
    """The file's elmo_info ({} for a file without one: an ``allennlp elmo`` file); refused, naming
    the file and field, when it is not elmo's (:func:`read_info`)."""
    raw = f.attrs.get(INFO_ATTR)
    return read_info(raw, f.filename) if raw is not None else {}


def _open_file(path: str, cache_bytes: int) -> Embeddings:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such embeddings file")
    try:
        f = h5py.File(path, "r", rdcc_nbytes=cache_bytes)
    except OSError as e:
        raise ValueError(f"{path}: not a readable HDF5 file ({e})") from None
    try:
        layout = f.attrs.get(LAYOUT_ATTR)
        if layout == "packed" or (layout is None and "vectors" in f and "offsets" in f):
            return _PackedFile(path, f)
        if layout == "allennlp" or "sentence_to_index" in f:
            return _AllenNLPFile(path, f)
        raise ValueError(f"{path}: not an elmo embed file: neither the allennlp elmo layout (no "
                         "'sentence_to_index') nor the packed one (no 'vectors')")
    except BaseException:
        f.close()
        raise


def _open_folder(folder: str, cache_bytes: int) -> Embeddings:
    manifest_path = os.path.join(folder, MANIFEST)
    try:
        manifest = jsonio.read_json(manifest_path)
    except FileNotFoundError:
        partial = sorted(n for n in os.listdir(folder) if n.startswith("shard-"))
        hint = f" (it holds {', '.join(partial)}: is the run still going?)" if partial else ""
        raise FileNotFoundError(f"{folder}: no {MANIFEST}, so not the output of a finished sharded run{hint}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{manifest_path}: not an elmo shard manifest (no format {MANIFEST_FORMAT!r})")
    names = manifest.get("shards")
    if not isinstance(names, list) or len(names) != manifest.get("world_size"):
        raise ValueError(f"{manifest_path}: 'shards' must list world_size ({manifest.get('world_size')}) files")
    missing = [n for n in names if not os.path.isfile(os.path.join(folder, n))]
    if missing:
        raise FileNotFoundError(f"{folder}: shard(s) {', '.join(missing)} missing: their ranks have not finished; "
                                "rerun the same command with --resume")
    shards: list[Embeddings] = []
    try:
        for name in names:
            shards.append(_open_file(os.path.join(folder, name), cache_bytes))
        return _Shards(folder, shards, manifest)
    except BaseException:
        for shard in shards:
            shard.close()
        raise


def open_embeddings(path: str | os.PathLike | Sequence[str | os.PathLike],
                    cache_bytes: int = 64 << 20) -> Embeddings:
    """Open embeddings written by ``elmo embed`` (or ``Embedder.embed_file``) as one lazy
    sequence of arrays by sentence index.

    ``path`` is a file of either layout (``allennlp`` or ``packed``, see this module), the folder
    of a sharded run (its ``manifest.json`` says how the shards interleave), or a list of files,
    read one after another. Nothing is read until asked for; ``cache_bytes`` is the HDF5 chunk
    cache per file. Example::

        with elmo.open_embeddings("out.hdf5") as vectors:
            first = vectors[0]            # (layers, tokens, dim), or (tokens, dim)
            for array in vectors: ...     # in input order
    """
    if isinstance(path, (str, os.PathLike)):
        path = os.fspath(path)
        if os.path.isdir(path):
            return _open_folder(path, cache_bytes)
        return _open_file(path, cache_bytes)
    paths = [os.fspath(p) for p in path]
    if not paths:
        raise ValueError("open_embeddings: an empty list of files")
    parts: list[Embeddings] = []
    try:
        for p in paths:
            parts.append(open_embeddings(p, cache_bytes))
        return _Concatenation(parts)
    except BaseException:
        for part in parts:
            part.close()
        raise


__all__ = ["COMPRESSIONS", "DTYPES", "Embeddings", "LAYOUTS", "OutputOptions", "create_writer", "open_embeddings"]
