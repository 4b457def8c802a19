"""Hostile archives: peak disk and memory of loading zip bombs at elmo's bounds (issue 45), and
what the SHA-256 cache key costs a genuine archive.

* ``nlpl``: an NLPL zip holding the published original ELMo's ``options.json`` (93.6M parameters)
  and a ``model.hdf5`` that is the HDF5 signature and then zeros: once exactly at the bound those
  options allow (extracted, refused by h5py, removed), once at 4 GiB (refused unread).
* ``manylangs``: an ELMoForManyLangs zip in their released layout (no architecture file: their
  published 4096/512 architecture) whose ``encoder.pkl`` is a pickle header and then zeros, at its
  bound and at 4 GiB.
* ``reuse``: a 374 MB member (the original ELMo's weights' size, random bytes after the HDF5
  signature) extracted by :meth:`ModelFolder.local_file`, then found again (streamed through
  SHA-256, and the cached copy's SHA-256 checked), against the time of reading the member alone.

Each load runs in a fresh process: its peak resident memory (``ru_maxrss``) is read before and
after the load, and a thread samples the bytes under the cache folder every 2 ms for the peak disk.

    python benchmarks/hostile_archives.py --output results/benchmarks/hostile_archives.json
    python benchmarks/hostile_archives.py --quick --output hostile_archives.json   # seconds

``--quick``: the same loads at the bounds of tiny models (the ``tiny`` preset's options; the
ManyLangs fixture's own small architecture), twice the bound instead of 4 GiB, a 4 MB member to
reuse: the code, in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import write_results  # noqa: E402

MANYLANGS = ROOT / "tests" / "fixtures" / "manylangs" / "model"

def load_here(archive: str, cache: str) -> dict:
    """Load ``archive`` in this (fresh) process with ``ELMO_CACHE=cache``: the error it raised, its
    seconds, the peak bytes under ``cache`` (sampled every 2 ms), what was left there, and the rise
    of this process's peak resident memory (what the load needs imported first, so the rise is the
    load's own)."""
    import resource
    import threading

    import h5py  # noqa: F401

    import elmo.hub.manylangs  # noqa: F401
    import elmo.hub.resolve  # noqa: F401
    from elmo.hub import load_model

    os.environ["ELMO_CACHE"] = cache
    peak, done = [0], threading.Event()

    def sample():
        while not done.is_set():
            total = 0
            for folder, _, files in os.walk(cache):
                for name in files:
                    try:
                        total += os.path.getsize(os.path.join(folder, name))
                    except OSError:
                        pass
            peak[0] = max(peak[0], total)
            time.sleep(0.002)

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    start = time.perf_counter()
    try:
        load_model(archive)
        error = None
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    seconds = time.perf_counter() - start
    done.set()
    thread.join()
    left = sum(len(files) + len(dirs) for _, dirs, files in os.walk(cache))
    return {"error": error, "seconds": round(seconds, 2), "peak_disk": peak[0], "left_in_cache": left,
            "peak_rss_growth": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before}


def bomb(path: Path, members: dict[str, bytes], name: str, head: bytes, size: int) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in members.items():
            z.writestr(member, data)
        with z.open(name, "w", force_zip64=True) as f:
            f.write(head)
            left = size - len(head)
            while left:
                f.write(bytes(min(left, 2**24)))
                left -= min(left, 2**24)
    return path


def load(archive: Path, cache: Path) -> dict:
    """:func:`load_here` in a fresh process."""
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--load", str(archive), str(cache)],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["error"] = result["error"] and result["error"].replace(str(archive.parent), "WORK")
    result["zip_bytes"] = archive.stat().st_size
    return result


def nlpl(work: Path, quick: bool) -> dict:
    from elmo.hub.archives import HDF5_SIGNATURE, member_bound
    from elmo.model.config import preset_config

    config = preset_config("tiny" if quick else "original")
    options = json.dumps(config.to_dict()).encode()
    bound = member_bound(config.parameter_count())
    results = {"parameters": config.parameter_count(), "bound": bound}
    for label, size in (("at the bound", bound), beyond(bound, quick)):
        archive = bomb(work / "nlpl.zip", {"options.json": options}, "model.hdf5", HDF5_SIGNATURE, size)
        results[label] = {"member_bytes": size, **load(archive, work / f"cache-nlpl-{size}")}
    return results


def manylangs(work: Path, quick: bool) -> dict:
    from elmo.hub.archives import member_bound
    from elmo.hub.manylangs import member_parameters
    from elmo.model.dictionary import parse_dictionary

    # Quick: the fixture's own small architecture file (cnn_tiny.json); else none, so their
    # published architecture, the largest a model without the file may be.
    members = {p.name: p.read_bytes() for p in MANYLANGS.iterdir()
               if p.name != "encoder.pkl" and (quick or p.name != "cnn_tiny.json")}
    if not quick:
        members["config.json"] = b'{"config_path": "configs/cnn_50_100_512_4096_sample.json"}'
    rows = [max(parse_dictionary((MANYLANGS / n).read_text(encoding="utf-8"), n).values()) + 1
            for n in ("char.dic", "word.dic")]
    arch = json.loads(members["cnn_tiny.json"]) if quick else None
    parameters = member_parameters(arch, *rows)["encoder.pkl"]
    bound = member_bound(parameters)
    results = {"parameters": parameters, "bound": bound}
    for label, size in (("at the bound", bound), beyond(bound, quick)):
        archive = bomb(work / "manylangs.zip", members, "encoder.pkl", b"\x80\x02", size)
        results[label] = {"member_bytes": size, **load(archive, work / f"cache-manylangs-{size}")}
    return results


def beyond(bound: int, quick: bool) -> tuple[str, int]:
    """The member far past the bound: 4 GiB, or twice the bound when quick."""
    return ("twice the bound", 2 * bound) if quick else ("4 GiB", 4 * 2**30)


def reuse(work: Path, quick: bool) -> dict:
    from elmo.hub.archives import HDF5_SIGNATURE, ModelFolder

    size = (4 if quick else 374) * 10**6
    archive = work / "reuse.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z, z.open("model.hdf5", "w", force_zip64=True) as f:
        f.write(HDF5_SIGNATURE)
        left = size - len(HDF5_SIGNATURE)
        while left:
            f.write(os.urandom(min(left, 2**24)))
            left -= min(left, 2**24)
    os.environ["ELMO_CACHE"] = str(work / "cache-reuse")
    with ModelFolder(archive) as folder:
        start = time.perf_counter()
        with zipfile.ZipFile(archive) as z, z.open("model.hdf5") as member:
            while member.read(2**20):
                pass
        read_once = time.perf_counter() - start
        start = time.perf_counter()
        folder.local_file("model.hdf5")
        first = time.perf_counter() - start
        start = time.perf_counter()
        folder.local_file("model.hdf5")
        again = time.perf_counter() - start
    return {"member_bytes": size, "read_member_seconds": round(read_once, 2), "first_load_seconds": round(first, 2),
            "later_load_seconds": round(again, 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="results/benchmarks/hostile_archives.json")
    parser.add_argument("--quick", action="store_true", help="tiny models' bounds, a 4 MB member: seconds")
    parser.add_argument("--load", nargs=2, metavar=("ARCHIVE", "CACHE"), help=argparse.SUPPRESS)  # one load_here
    args = parser.parse_args(argv)
    if args.load:
        print(json.dumps(load_here(*args.load)))
        return
    with tempfile.TemporaryDirectory(prefix="elmo-hostile-") as work:
        results = {"nlpl": nlpl(Path(work), args.quick), "manylangs": manylangs(Path(work), args.quick),
                   "reuse": reuse(Path(work), args.quick)}
    print(json.dumps(results, indent=2))
    write_results(args.output, {"quick": args.quick, **results})


if __name__ == "__main__":
    main()
