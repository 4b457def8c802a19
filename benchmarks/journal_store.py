"""The work file of a resumable ``elmo embed``: elmo's journal against SQLite (WAL) and Arrow IPC.

Writes ``--megabytes`` of synthetic batches (random vectors of ``--sentences-per-batch`` sentences
of 20-30 tokens, token shape ``--token-shape``, float32; their texts, line numbers and token
counts) into three stores, each made crash-safe the way a run needs (forced to disk every 5 s and
at the end), then times what a resumed run must do before it may reuse a batch: read every batch
back and verify it. Each store's verification is timed twice: warm (the file in the page cache,
as right after a kill) and cold (its pages dropped with ``posix_fadvise(DONTNEED)``, as after a
reboot; a VM's host may still cache them). The stores, interleaved over ``--repeats`` rounds:

* ``journal``: elmo's own (:mod:`elmo.inference.journal`): frames with a CRC-32 each, appended;
  verified by ``WorkFolder.scan()``, which checks every frame's CRC.
* ``sqlite-wal``: the standard library's SQLite, ``journal_mode=WAL``, ``synchronous=NORMAL``, one
  row and one transaction per batch (the same bytes, as BLOBs, plus our CRC-32 column: SQLite
  checks no page contents, so ``PRAGMA quick_check`` is timed too, and then every row is read and
  its CRC compared).
* ``arrow-ipc``: an Arrow IPC stream file (pyarrow, not a dependency of elmo), one record batch
  per batch, plus our CRC-32 column (Arrow's format has no checksums); verified by reading every
  batch and comparing the CRC.

Then each store gets 16 bytes of 1e30 written into one batch's vectors, and is read again with its
own checks alone (the journal's scan; SQLite's ``PRAGMA integrity_check``; Arrow's reader with
validation): does the store itself notice?

    python benchmarks/journal_store.py --megabytes 512 --repeats 3 --output results/benchmarks/journal_store.json
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import write_results  # noqa: E402

from elmo.inference.journal import SYNC_SECONDS, WorkFolder  # noqa: E402

GARBAGE = np.full(4, 1e30, dtype="<f4").tobytes()


def print_table(header: list[str], rows: list[list]) -> None:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(x).rjust(w) for x, w in zip(row, widths)))


def make_batches(megabytes: int, sentences: int, token_shape: tuple[int, ...], seed: int = 0) -> list[dict]:
    """Synthetic batches of about ``megabytes`` MiB of vectors in all; the vectors of one random
    pool are reused (views), so that making them costs neither time nor memory."""
    rng = np.random.default_rng(seed)
    width = int(np.prod(token_shape))
    pool = rng.standard_normal((sentences * 30, width), dtype=np.float32)
    batches, total, c, b = [], 0, 0, 0
    while total < megabytes << 20:
        n_tokens = rng.integers(20, 31, size=sentences).tolist()
        rows = pool[:sum(n_tokens)]
        texts = [" ".join(["word"] * n) for n in n_tokens]
        batches.append({"chunk": c, "batch": b, "last": b == 63, "n_tokens": n_tokens, "texts": texts,
                        "line_numbers": list(range(len(batches) * sentences, (len(batches) + 1) * sentences)),
                        "vectors": rows})
        total += rows.nbytes
        c, b = (c + 1, 0) if b == 63 else (c, b + 1)
    return batches


def drop_cache(paths: list[str]) -> None:
    """Ask the kernel to drop the (clean, already synced) pages of ``paths`` from its cache."""
    for path in paths:
        if os.path.exists(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def store_bytes(paths: list[str]) -> int:
    return sum(os.path.getsize(p) for p in paths if os.path.exists(p))


# ------------------------------------------------------------------------------------- stores
class Journal:
    name = "journal"

    def __init__(self, folder: str):
        self.work = WorkFolder(os.path.join(folder, "out.hdf5"))
        os.mkdir(self.work.path)
        open(self.work.journal_path, "wb").close()
        self.paths = [self.work.journal_path]

    def write(self, batches: list[dict]) -> None:
        with self.work.appender() as journal:
            for x in batches:
                journal.append(chunk=x["chunk"], batch=x["batch"], last=x["last"], digest=bytes(32),
                               line_numbers=x["line_numbers"], n_tokens=x["n_tokens"], texts=x["texts"],
                               vectors=[x["vectors"]], vector_bytes=x["vectors"].nbytes)

    def verify(self) -> int:
        frames = self.work.scan()
        assert not self.work.damage
        return len(frames)

    def garble(self) -> None:
        frames = self.work.scan()
        with open(self.work.journal_path, "r+b") as f:
            f.seek(frames[len(frames) // 2].vector_offset + 64)
            f.write(GARBAGE)

    def notices(self) -> bool:
        self.work.scan()
        return bool(self.work.damage)


class SQLiteWAL:
    name = "sqlite-wal"

    def __init__(self, folder: str):
        self.path = os.path.join(folder, "journal.sqlite")
        self.paths = [self.path, self.path + "-wal", self.path + "-shm"]
        self.db = sqlite3.connect(self.path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints, never corrupt
        self.db.execute("CREATE TABLE frames (chunk INTEGER, batch INTEGER, last INTEGER, meta BLOB, text BLOB, "
                        "vectors BLOB, crc INTEGER, PRIMARY KEY (chunk, batch))")

    def write(self, batches: list[dict]) -> None:
        last_sync = time.monotonic()
        for x in batches:
            meta = np.asarray([x["line_numbers"], x["n_tokens"], [len(t) for t in x["texts"]]], dtype="<i8").tobytes()
            text = "".join(x["texts"]).encode("utf-8")
            vectors = x["vectors"].tobytes()
            crc = zlib.crc32(vectors, zlib.crc32(text, zlib.crc32(meta)))
            self.db.execute("BEGIN")
            self.db.execute("INSERT INTO frames VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (x["chunk"], x["batch"], x["last"], meta, text, vectors, crc))
            self.db.execute("COMMIT")
            if time.monotonic() - last_sync >= SYNC_SECONDS:  # like the journal's fsync every 5 s
                self.db.execute("PRAGMA wal_checkpoint(FULL)")
                last_sync = time.monotonic()
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def quick_check(self) -> float:
        start = time.perf_counter()
        assert self.db.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        return time.perf_counter() - start

    def verify(self) -> int:
        n = 0
        for meta, text, vectors, crc in self.db.execute("SELECT meta, text, vectors, crc FROM frames "
                                                        "ORDER BY chunk, batch"):
            assert zlib.crc32(vectors, zlib.crc32(text, zlib.crc32(meta))) == crc
            n += 1
        return n

    def garble(self) -> None:
        self.db.close()
        with open(self.path, "r+b") as f:  # inside a page in the middle of the file: some batch's vectors
            f.seek(os.path.getsize(self.path) // 2 // 4096 * 4096 + 1024)
            f.write(GARBAGE)
        self.db = sqlite3.connect(self.path, isolation_level=None)

    def notices(self) -> bool:
        return self.db.execute("PRAGMA integrity_check").fetchone()[0] != "ok"


class ArrowIPC:
    name = "arrow-ipc"

    def __init__(self, folder: str):
        import pyarrow as pa

        self.pa = pa
        self.path = os.path.join(folder, "journal.arrows")
        self.paths = [self.path]
        self.schema = pa.schema([("chunk", pa.int64()), ("batch", pa.int64()), ("line", pa.int64()),
                                 ("n_tokens", pa.int64()), ("text", pa.string()), ("vectors", pa.binary()),
                                 ("crc", pa.uint32())])

    def write(self, batches: list[dict]) -> None:
        pa = self.pa
        last_sync = time.monotonic()
        with open(self.path, "wb") as f, pa.ipc.new_stream(f, self.schema) as writer:
            for x in batches:
                rows, start = [], 0
                for n in x["n_tokens"]:  # one row per sentence: its vectors as bytes
                    rows.append(x["vectors"][start:start + n].tobytes())
                    start += n
                crcs = [zlib.crc32(v, zlib.crc32(t.encode("utf-8"))) for v, t in zip(rows, x["texts"])]
                k = len(rows)
                writer.write_batch(pa.record_batch([[x["chunk"]] * k, [x["batch"]] * k, x["line_numbers"],
                                                    x["n_tokens"], x["texts"], rows, crcs], schema=self.schema))
                f.flush()
                if time.monotonic() - last_sync >= SYNC_SECONDS:
                    os.fsync(f.fileno())
                    last_sync = time.monotonic()
            f.flush()
            os.fsync(f.fileno())

    def _read(self, check_crc: bool) -> int:
        n = 0
        with self.pa.memory_map(self.path) as source:
            for batch in self.pa.ipc.open_stream(source):
                batch.validate(full=True)
                if check_crc:
                    texts, vectors, crcs = (batch.column(i).to_pylist() for i in (4, 5, 6))
                    assert all(zlib.crc32(v, zlib.crc32(t.encode("utf-8"))) == c
                               for t, v, c in zip(texts, vectors, crcs))
                n += 1
        return n

    def verify(self) -> int:
        return self._read(check_crc=True)

    def garble(self) -> None:
        with open(self.path, "r+b") as f:
            f.seek(os.path.getsize(self.path) // 2)
            f.write(GARBAGE)

    def notices(self) -> bool:
        try:
            self._read(check_crc=False)
        except Exception:  # noqa: BLE001 - any refusal by the reader counts as noticing
            return True
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=512, help="MiB of vectors per store")
    parser.add_argument("--sentences-per-batch", type=int, default=64)
    parser.add_argument("--token-shape", default="3,1024", help="layers,dim of one token's vectors (float32)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stores", default="journal,sqlite-wal,arrow-ipc")
    parser.add_argument("--workdir", default=None, help="where the stores are written (default: a temp folder)")
    parser.add_argument("--output", required=True, help="JSON file to write")
    args = parser.parse_args()
    token_shape = tuple(int(x) for x in args.token_shape.split(","))
    kinds = {k.name: k for k in (Journal, SQLiteWAL, ArrowIPC)}
    names = args.stores.split(",")
    batches = make_batches(args.megabytes, args.sentences_per_batch, token_shape)
    payload = sum(x["vectors"].nbytes for x in batches)
    gib = payload / 2**30
    runs: dict[str, dict[str, list[float]]] = {n: {"write": [], "warm": [], "cold": [], "quick_check": [],
                                                   "bytes": []} for n in names}
    notices: dict[str, bool] = {}
    for round_ in range(args.repeats):
        for name in names:
            with tempfile.TemporaryDirectory(dir=args.workdir) as folder:
                store = kinds[name](folder)
                start = time.perf_counter()
                store.write(batches)
                runs[name]["write"].append(time.perf_counter() - start)
                runs[name]["bytes"].append(store_bytes(store.paths))
                for temperature in ("warm", "cold"):
                    if temperature == "cold":
                        drop_cache(store.paths)
                    start = time.perf_counter()
                    assert store.verify() == len(batches)
                    runs[name][temperature].append(time.perf_counter() - start)
                if name == "sqlite-wal":
                    runs[name]["quick_check"].append(store.quick_check())
                if round_ == 0:
                    store.garble()
                    notices[name] = store.notices()
                if name == "sqlite-wal":
                    store.db.close()
    rows, results = [], {}
    for name in names:
        r = runs[name]
        write, warm, cold = (statistics.median(r[k]) for k in ("write", "warm", "cold"))
        results[name] = {k: v for k, v in r.items() if v} | {
            "write_mib_per_s": payload / 2**20 / write, "verify_warm_s_per_gib": warm / gib,
            "verify_cold_s_per_gib": cold / gib, "notices_garbled_vectors_itself": notices.get(name)}
        quick = f"{statistics.median(r['quick_check']) / gib:.2f}" if r["quick_check"] else "-"
        rows.append([name, f"{statistics.median(r['bytes']) / 2**20:,.0f}", f"{payload / 2**20 / write:,.0f}",
                     f"{warm / gib:.2f}", f"{cold / gib:.2f}", quick,
                     {True: "yes", False: "no", None: "-"}[notices.get(name)]])
    print(f"{len(batches)} batches of {args.sentences_per_batch} sentences, {payload / 2**20:,.0f} MiB of vectors "
          f"(token shape {token_shape}, float32); medians of {args.repeats} rounds")
    print_table(["store", "MiB on disk", "write MiB/s", "verify s/GiB warm", "verify s/GiB cold",
                 "quick_check s/GiB", "notices 16 garbled bytes itself"], rows)
    write_results(args.output, {"command": " ".join(sys.argv), "batches": len(batches),
                                "sentences_per_batch": args.sentences_per_batch, "token_shape": list(token_shape),
                                "vector_bytes": payload, "load_average": os.getloadavg(), "stores": results})


if __name__ == "__main__":
    main()
