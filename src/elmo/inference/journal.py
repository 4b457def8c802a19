"""The work file of a resumable ``elmo embed``: what has been embedded so far, safe against a
kill at any moment.

An HDF5 file being written is not safe to kill: the library keeps part of the file's structure in
memory and writes it back at times of its own, so a file cut off mid-run may not open at all. So
the vectors first go, one batch at a time, into an append-only journal, and the output file is
written from the journal once every line has been embedded (then renamed into place, so that it
appears only complete). The work file is the folder ``OUTPUT.partial/`` beside the output:

* ``work.json``: the run's fingerprint (model, options, shard), checked by a resumed run;
* ``journal.bin``: one frame per batch: a header (the chunk of input it comes from and that
  chunk's SHA-256, the batch's place in it, the run's identity: :func:`run_identity` of the
  fingerprint in ``work.json``), each sentence's line number, token count and text,
  its vectors in the stored dtype, the carried LSTM state in stateful mode, and a CRC-32;
* ``synced``: how far the journal is known to be on disk (``fsync``), at most a few seconds old;
* ``lock``: held while a process writes the folder, so two runs cannot write one output;
* ``.elmo-owner``: elmo's marker (:func:`elmo.fileio.make_owned_folder`), made with the folder:
  only a folder with it is ever taken over or deleted (one made before the marker existed is
  recognised by its ``work.json``).

A frame counts once it is whole, passes its CRC-32 check and carries the identity of the run
``work.json`` describes, which a resumed run checks for every frame before reusing it
(:meth:`WorkFolder.scan`): a frame of another run (another model, other layers or options, put
there by a copy or a mix-up) is never copied, and its batch is embedded again. A kill leaves at most one partial frame at the
end, which a resumed run cuts off; any other frame that fails (bytes garbled on disk) is never
copied: its batch is embedded again from the input. ``synced`` tells the two apart, so that only
damage to what was on disk is reported. The folder is removed once the output is in place.

The format is elmo's own rather than SQLite's or Arrow's: neither checks the contents it holds,
so the CRC would be ours with either, and this journal wrote 2x (Arrow IPC) to 9x (SQLite, WAL)
faster and verified as fast or faster (docs/large-corpora.md; ``benchmarks/journal_store.py``, in
git at commit 4c07a18).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import struct
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elmo.fileio import OWNER_FILE, atomic_write_text, make_owned_folder, read_owner, remove_owned_folder
from elmo.jsonio import JSONFileError, read_json
from elmo.jsonio import field as jsonio_field

WORK_SUFFIX = ".partial"
WORK_NAMES = frozenset({"work.json", "journal.bin", "synced", "lock", OWNER_FILE})
WORK_FORMAT = "elmo-embed-work"
WORK_KIND = "embed work file"  # the kind in its marker
WORK_VERSION = 2  # 2: frames carry the run's identity

MAGIC = b"ELMB"
END = b"BMLE"
# magic, chunk, batch, sentences, last batch of its chunk, text bytes, vector bytes, state bytes, chunk SHA-256,
# run identity
HEADER = struct.Struct("<4sQII?3xQQQ32s16s")
TRAILER = struct.Struct("<I4s")  # CRC-32 of header and payload, end marker
# The journal is forced to disk (fsync) at most this often: a kill loses at most one batch
# whatever this is; a power loss loses at most the last few seconds.
SYNC_SECONDS = 5.0
READ_PIECE_BYTES = 8 << 20


class WorkFileError(ValueError):
    """A work file that cannot be continued (another run's, or damaged)."""


def run_identity(fingerprint: dict) -> bytes:
    """16 bytes that name a run by what decides its vectors (its fingerprint: the weights, the
    options, the shard), written into every frame it appends."""
    canonical = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).digest()[:16]


@dataclass
class Frame:
    """Where one batch's frame lies in the journal, and what it holds."""

    offset: int
    chunk: int
    batch: int
    sentences: int
    last: bool
    text_bytes: int
    vector_bytes: int
    state_bytes: int
    digest: bytes
    run: bytes = b""  # the identity of the run that wrote it (run_identity)
    tokens: int = 0
    foreign: bool = False  # whole and intact, but another run's

    @property
    def meta_offset(self) -> int:
        return self.offset + HEADER.size

    @property
    def text_offset(self) -> int:
        return self.meta_offset + 24 * self.sentences

    @property
    def vector_offset(self) -> int:
        return self.text_offset + self.text_bytes

    @property
    def state_offset(self) -> int:
        return self.vector_offset + self.vector_bytes

    @property
    def end(self) -> int:
        return self.state_offset + self.state_bytes + TRAILER.size


@dataclass
class Damage:
    """Journal bytes ``offset..end`` that hold no whole frame passing its check, and the frames
    found there whose fields hang together but fail the check (``suspects``: which batches
    were lost, as far as their unverified headers tell)."""

    offset: int
    end: int
    suspects: list[Frame]
    missing: bool = False  # the journal ends at offset, short of its synced mark

    def lost(self) -> set[tuple[int, int]]:
        return {(frame.chunk, frame.batch) for frame in self.suspects if not frame.foreign}

    @property
    def foreign(self) -> bool:
        """Whether every frame found there is whole but another run's (none failed its check)."""
        return bool(self.suspects) and all(frame.foreign for frame in self.suspects)

    def __str__(self) -> str:
        return f"bytes {self.offset:,}..{self.end:,} {self.what()}"

    def what(self) -> str:
        if self.missing:
            return "are missing (the synced mark says they were on disk)"
        if self.foreign:
            return "hold frames of another run (another model, or other options), which were not copied"
        return "are damaged (they fail the journal's CRC-32 check)"


def chunk_digest(lines: Iterable[str]) -> bytes:
    """SHA-256 of a chunk of input lines: a resumed run checks it reads the same input."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8", "surrogatepass"))
        digest.update(b"\n")
    return digest.digest()


def _fields_that_differ(old: dict, new: dict) -> list[str]:
    return [f"{k}: the interrupted run had {old.get(k)!r}, this one has {new.get(k)!r}"
            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


class WorkFolder:
    """The work file ``OUTPUT.partial/`` of the output ``output``."""

    def __init__(self, output: str | os.PathLike):
        self.output = os.fspath(output)
        self.path = self.output + WORK_SUFFIX
        self.journal_path = os.path.join(self.path, "journal.bin")
        self.info_path = os.path.join(self.path, "work.json")
        self.synced_path = os.path.join(self.path, "synced")
        self.damage: list[Damage] = []  # what the last scan() found damaged
        self.lost_tail_bytes = 0
        self._lock_fd: int | None = None
        self._run: bytes | None = None  # run_identity of work.json's fingerprint, once known

    def exists(self) -> bool:
        return os.path.isdir(self.path)

    def check_ours(self, path: str | None = None) -> str | None:
        """Refuse a folder at our path (or ``path``) that elmo cannot show is an elmo embed work
        file (a user's folder that happens to have this name), so that it is never taken over or
        deleted. Ours holds elmo's marker and only the files named above (and the temporaries of
        their atomic writes); one made before the marker existed has no marker, but a ``work.json``
        that says what it is. Returns the marker's id (None: no marker), which
        :meth:`remove` checks again just before deleting."""
        path = path or self.path
        names = sorted(os.listdir(path))
        strays = [n for n in names if n not in WORK_NAMES
                  and not (n.endswith(".tmp") and n.split(".", 1)[0] in {"work", "synced"})]
        if strays:
            shown = ", ".join(strays[:3]) + (", ..." if len(strays) > 3 else "")
            raise WorkFileError(f"{self.path}: in the way of the work file of {self.output}, and not an elmo embed "
                                f"work file (it holds {shown}); move it away or choose another output")
        owner = read_owner(path)
        if owner is not None and owner["kind"] == WORK_KIND:
            return owner["id"]
        if not names or (names == ["lock"] and os.path.getsize(os.path.join(path, "lock")) == 0):
            return None  # empty, or only the empty lock file a refused resume made: nothing to lose
        try:
            info = read_json(os.path.join(path, "work.json"))
        except (OSError, ValueError):
            info = None
        if owner is None and isinstance(info, dict) and info.get("format") == WORK_FORMAT:
            return None  # made before the marker existed
        whose = ("its work.json is another program's" if isinstance(info, dict) and owner is None
                 else f"it holds {', '.join(names)}, without elmo's marker or a work.json of elmo's")
        raise WorkFileError(f"{self.path}: in the way of the work file of {self.output}, and not an elmo embed "
                            f"work file ({whose}); move it away or choose another output")

    def is_empty(self) -> bool:
        """Whether the journal holds nothing (a run that failed before its first batch)."""
        return not os.path.exists(self.journal_path) or os.path.getsize(self.journal_path) == 0

    # ---------------------------------------------------------------------------- lifecycle
    def create(self, fingerprint: dict, about: dict) -> None:
        """A new, empty work folder for a run with this fingerprint (``about``: informative only)."""
        make_owned_folder(self.path, WORK_KIND)
        self.lock()
        self._run = run_identity(fingerprint)
        atomic_write_text(self.info_path, json.dumps({"format": WORK_FORMAT, "version": WORK_VERSION,
                                                      "fingerprint": fingerprint, **about}, indent=1))
        open(self.journal_path, "wb").close()

    def open(self, fingerprint: dict) -> None:
        """Take over an interrupted run's folder, refusing it when its fingerprint differs."""
        self.check_ours()
        self.lock()
        info = self.read_info()
        differences = _fields_that_differ(info["fingerprint"], fingerprint)
        if differences:
            raise WorkFileError(f"{self.path}: this work file is from a run with other settings, so resuming would "
                                f"mix two kinds of vectors ({'; '.join(differences)}). Rerun with the interrupted "
                                "run's model and options, or pass --force to start over")
        self._run = run_identity(fingerprint)
        if not os.path.exists(self.journal_path):
            open(self.journal_path, "wb").close()

    def lock(self) -> None:
        """Hold the folder's lock for as long as this process lives (released by the OS at exit,
        however it ends)."""
        if self._lock_fd is not None:
            return
        fd = os.open(os.path.join(self.path, "lock"), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise WorkFileError(f"{self.output}: another elmo embed is writing this output right now "
                                f"(it holds {self.path}/lock)") from None
        self._lock_fd = fd

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def remove(self) -> None:
        """Delete the folder (after the output is in place, or to start over), only once it shows
        it is ours (:meth:`check_ours`, checked again on the very folder being deleted)."""
        if not self.exists():
            return
        self.check_ours()  # before the lock, which would add a file to a folder not ours
        if self._lock_fd is None:
            self.lock()  # never delete a folder another process is writing
        remove_owned_folder(self.path, self.check_ours)
        self.release()

    def run(self) -> bytes:
        """The identity every frame of this work file must carry: that of the fingerprint this
        process created or opened it with, else the one its ``work.json`` records."""
        if self._run is None:
            self._run = run_identity(self.read_info()["fingerprint"])
        return self._run

    def read_info(self) -> dict:
        """The folder's ``work.json``, checked: an object of elmo's format and version whose
        ``fingerprint`` is an object. Anything else (missing, out of :mod:`elmo.jsonio`'s bounds,
        a field of the wrong type) is a :class:`WorkFileError` naming the file (and field)."""
        try:
            info = read_json(self.info_path)
            if jsonio_field(info, "format", str, self.info_path) != WORK_FORMAT or (
                    jsonio_field(info, "version", int, self.info_path) != WORK_VERSION):
                raise WorkFileError(f"{self.path}: not an elmo embed work file of version {WORK_VERSION}; remove it "
                                    "(or pass --force) to start over")
            jsonio_field(info, "fingerprint", dict, self.info_path)
        except OSError as e:
            raise WorkFileError(f"{self.path}: not a readable work file ({self.info_path}: "
                                f"{e.strerror or e}); remove it (or pass --force) to start over") from None
        except JSONFileError as e:
            raise WorkFileError(f"{self.path}: not a readable work file ({e}); remove it (or pass --force) "
                                "to start over") from None
        return info

    # -------------------------------------------------------------------------------- reading
    def scan(self, chained: bool = False) -> list[Frame]:
        """The journal's whole frames that pass their CRC-32 check, sorted by chunk and batch.

        Every frame is verified before it is used, wherever it lies: a frame that fails (a torn
        write, a garbled byte on disk) is never used, so its batch is embedded again. What failed
        is in :attr:`damage`, except a torn tail past the ``synced`` mark, the normal end of a
        killed run. A damaged or torn tail is cut off (the next frames are appended there);
        damage followed by whole frames stays in the file, skipped. ``chained`` (the stateful
        policy, whose every batch starts from the state the one before ended in): only the
        frames before the first damage are kept, and the journal is cut there.

        Refused (:class:`WorkFileError`, naming the byte): a second whole frame for a batch
        already in the journal, as which one is right cannot be told.
        """
        try:
            synced = int(Path(self.synced_path).read_text().strip() or 0)
        except (OSError, ValueError):
            synced = 0
        frames: list[Frame] = []
        self.damage = []
        self.run()
        seen: dict[tuple[int, int], Frame] = {}
        with open(self.journal_path, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            position, cut = 0, None
            while position < size:
                frame, whole = self._frame_at(f, position, size)
                if whole:
                    key = (frame.chunk, frame.batch)
                    if key in seen:
                        raise WorkFileError(f"{self.journal_path}: damaged at byte {position:,}: a second frame for "
                                            f"batch {frame.batch} of chunk {frame.chunk} (the first is at byte "
                                            f"{seen[key].offset:,}); remove {self.path} (or pass --force) to start "
                                            "over")
                    seen[key] = frame
                    frames.append(frame)
                    position = frame.end
                    continue
                damage = self._damaged_run(f, position, size, frame)
                if damage.end == size and position >= synced:
                    cut = position  # a torn tail: the batch a kill (or power loss) interrupted
                    break
                self.damage.append(damage)
                if damage.end == size:
                    cut = position
                    break
                position = damage.end
            if position < synced and not any(d.offset <= position < d.end for d in self.damage):
                # shorter than what was known to be on disk: the missing bytes held whole frames
                self.damage.append(Damage(position, synced, [], missing=True))
            lost_from = None  # where damage reaching the journal's end starts, if any
            if chained and self.damage:
                cut = lost_from = self.damage[0].offset
                self.damage[0].suspects.extend(frame for frame in frames if frame.offset >= cut)
                frames = [frame for frame in frames if frame.end <= cut]
            elif self.damage and self.damage[-1].end >= size:
                lost_from = self.damage[-1].offset
            # Damaged bytes at the end that no readable header accounts for: the first batches
            # appended there are the lost ones (a batch's frame comes out the same size again).
            self.lost_tail_bytes = 0
            if lost_from is not None:
                known = [frame for d in self.damage for frame in d.suspects if frame.offset >= lost_from]
                end = max([synced, *(frame.end for frame in known)])
                self.lost_tail_bytes = max(0, end - lost_from - sum(frame.end - frame.offset for frame in known))
            if cut is not None and cut < size:
                f.truncate(cut)
            for frame in frames:
                f.seek(frame.meta_offset + 8 * frame.sentences)
                frame.tokens = int(np.fromfile(f, dtype="<i8", count=frame.sentences).sum())
        return sorted(frames, key=lambda frame: (frame.chunk, frame.batch))

    def damage_report(self, again: int) -> str:
        """One line for the user on what the last :meth:`scan` found damaged; ``again``: the
        sentences embedded again for it."""
        first, more = self.damage[0], len(self.damage) - 1
        where = f"bytes {first.offset:,}..{first.end:,}" + (f" and {more} more place{'s' * (more > 1)}" if more else "")
        if not more and (first.missing or first.foreign):
            what = first.what()
        elif not more:
            what = f"{first.what()} and were not copied"
        else:
            what = "are damaged (they fail the journal's CRC-32 check, or are another run's) and were not copied"
        if again:
            return f"{self.journal_path}: {where} {what}; {again:,} sentences embedded again from the input"
        return f"{self.journal_path}: {where} {what}; their sentences were embedded again by an earlier resume"

    def _frame_at(self, f, position: int, size: int) -> tuple[Frame | None, bool]:
        """The frame whose header is at ``position``, if its fields hang together (its end marker
        is where its lengths say, within the file), and whether it can be used: it passes its
        CRC-32 check and is this run's (a whole frame of another run comes back ``foreign``)."""
        if position + HEADER.size + TRAILER.size > size:
            return None, False
        f.seek(position)
        fields = HEADER.unpack(f.read(HEADER.size))
        if fields[0] != MAGIC:
            return None, False
        frame = Frame(position, *fields[1:])
        if frame.end > size:
            return None, False
        f.seek(frame.end - TRAILER.size)
        crc, end = TRAILER.unpack(f.read(TRAILER.size))
        if end != END:
            return None, False
        if crc != self._crc(f, frame):
            return frame, False
        frame.foreign = frame.run != self.run()
        return frame, not frame.foreign

    def _damaged_run(self, f, position: int, size: int, frame: Frame | None) -> "Damage":
        """The damaged bytes from ``position`` up to the next whole frame, or to the end.
        ``frame``: the frame at ``position`` if its fields hang together (it failed its CRC-32)."""
        suspects = []
        candidate = position + 1
        while True:
            if frame is not None:
                suspects.append(frame)  # its header tells which batch was lost, unverified
                candidate = frame.end
            candidate = self._find_magic(f, candidate, size)
            if candidate is None:
                return Damage(position, size, suspects)
            frame, whole = self._frame_at(f, candidate, size)
            if whole:
                return Damage(position, candidate, suspects)
            if frame is None:
                candidate += 1

    @staticmethod
    def _find_magic(f, position: int, size: int) -> int | None:
        """The next offset from ``position`` where a frame's magic bytes are."""
        while position < size:
            f.seek(position)
            piece = f.read(READ_PIECE_BYTES + len(MAGIC) - 1)
            found = piece.find(MAGIC)
            if found >= 0:
                return position + found
            position += READ_PIECE_BYTES
        return None

    @staticmethod
    def _crc(f, frame: Frame) -> int:
        f.seek(frame.offset)
        crc, left = 0, frame.end - TRAILER.size - frame.offset
        while left > 0:
            piece = f.read(min(left, READ_PIECE_BYTES))
            if not piece:
                return -1
            crc = zlib.crc32(piece, crc)
            left -= len(piece)
        return crc

    def read_meta(self, f, frame: Frame) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """A frame's line numbers, token counts and texts (from the journal open as ``f``)."""
        f.seek(frame.meta_offset)
        meta = np.fromfile(f, dtype="<i8", count=3 * frame.sentences).reshape(3, frame.sentences)
        data = f.read(frame.text_bytes)
        ends = np.cumsum(meta[2])
        texts = [data[e - n:e].decode("utf-8") for e, n in zip(ends.tolist(), meta[2].tolist())]
        return meta[0], meta[1], texts

    def read_state(self, f, frame: Frame) -> bytes:
        f.seek(frame.state_offset)
        return f.read(frame.state_bytes)

    @staticmethod
    def read_vectors(f, offset: int, rows: int, token_shape: tuple[int, ...], dtype: np.dtype,
                     piece_rows: int) -> Iterator[np.ndarray]:
        """``rows`` token vectors from ``offset``, in pieces of at most ``piece_rows`` rows."""
        width = int(np.prod(token_shape))
        done = 0
        if rows == 0:
            yield np.empty((0, *token_shape), dtype=dtype)
            return
        while done < rows:
            n = min(piece_rows, rows - done)
            f.seek(offset + done * width * dtype.itemsize)
            piece = np.fromfile(f, dtype=dtype, count=n * width)
            if piece.size != n * width:
                raise WorkFileError(f"journal ends inside a frame at byte {offset}")
            yield piece.reshape(n, *token_shape)
            done += n

    # -------------------------------------------------------------------------------- writing
    @contextlib.contextmanager
    def appender(self) -> Iterator["JournalAppender"]:
        """Append frames to the journal (its ``frames``: those this appender wrote), synced at the end."""
        run = self.run()
        with open(self.journal_path, "ab") as f:
            appender = JournalAppender(f, self.synced_path, run)
            try:
                yield appender
            finally:
                appender.sync()


class JournalAppender:
    """Appends whole frames to the journal; a frame interrupted by an exception is removed again."""

    def __init__(self, f, synced_path: str, run: bytes):
        self.f, self.synced_path, self.run = f, synced_path, run
        self.last_sync = time.monotonic()
        self.frames: list[Frame] = []

    def append(self, *, chunk: int, batch: int, last: bool, digest: bytes, line_numbers: list[int],
               n_tokens: list[int], texts: list[str], vectors: Iterable[np.ndarray], vector_bytes: int,
               state: bytes = b"") -> Frame:
        """Write one batch's frame; ``vectors`` are the sentences' rows in order, in pieces, of
        ``vector_bytes`` in all (a long sentence arrives piece by piece and is never held whole)."""
        encoded = [t.encode("utf-8", "surrogatepass") for t in texts]
        text = b"".join(encoded)
        start = self.f.tell()
        frame = Frame(start, chunk, batch, len(texts), last, len(text), vector_bytes, len(state), digest,
                      self.run, int(sum(n_tokens)))
        meta = np.asarray([line_numbers, n_tokens, [len(e) for e in encoded]], dtype="<i8").reshape(3, -1)
        try:
            crc = 0
            for part in (HEADER.pack(MAGIC, chunk, batch, len(texts), last, len(text), vector_bytes, len(state),
                                     digest, self.run), meta.tobytes(), text):
                self.f.write(part)
                crc = zlib.crc32(part, crc)
            written = 0
            for piece in vectors:
                data = np.ascontiguousarray(piece).reshape(-1).view(np.uint8)
                self.f.write(data)
                crc = zlib.crc32(data, crc)
                written += data.nbytes
            if written != vector_bytes:
                raise RuntimeError(f"journal: a batch brought {written} bytes of vectors, {vector_bytes} announced")
            self.f.write(state)
            crc = zlib.crc32(state, crc)
            self.f.write(TRAILER.pack(crc, END))
            self.f.flush()  # the frame is now in the operating system's hands: a kill cannot lose it
        except BaseException:
            self.f.flush()
            self.f.truncate(start)
            self.f.seek(start)
            raise
        self.frames.append(frame)
        if time.monotonic() - self.last_sync >= SYNC_SECONDS:
            self.sync()
        return frame

    def sync(self) -> None:
        """Force the journal to disk and record how far it is there (for a power loss)."""
        self.f.flush()
        os.fsync(self.f.fileno())
        atomic_write_text(self.synced_path, str(self.f.tell()))
        self.last_sync = time.monotonic()
