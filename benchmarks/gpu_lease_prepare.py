"""Before a GPU lease (on a machine with PyPI): put AllenNLP 0.9's code where the GPU suite finds
it, ``.lease/allennlp-0.9.0`` in the checkout (ignored by git), so that it travels to the lease
with the working tree (the lease has no network) and the suite can run AllenNLP's own
``ElmoEmbedder`` on the same GPU as ``elmo embed``.

    python benchmarks/gpu_lease_prepare.py        # then give the lease's run carry: [".lease/allennlp-0.9.0"]

It runs ``pip download allennlp==0.9.0 --no-deps`` and unpacks the wheel without its tests
(about 3.4 MiB of the 64 MiB a lease carries). Nothing of AllenNLP is committed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.9.0"
DEFAULT_TARGET = ROOT / ".lease" / f"allennlp-{VERSION}"


def unpack(wheel: Path, target: Path) -> int:
    """The wheel's files, less ``allennlp/tests/``, into ``target`` (written beside it, then
    renamed: a cut run leaves no half folder); returns the bytes written."""
    partial = target.with_name(f".{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    size = 0
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if member.is_dir() or member.filename.startswith("allennlp/tests/"):
                continue
            archive.extract(member, partial)
            size += member.file_size
    if not (partial / "allennlp" / "modules" / "elmo.py").is_file():
        raise SystemExit(f"{wheel}: no allennlp/modules/elmo.py in it: not AllenNLP {VERSION}'s wheel")
    if target.exists():
        shutil.rmtree(target)
    os.replace(partial, target)
    return size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, default=DEFAULT_TARGET, help="where to unpack (default: %(default)s)")
    parser.add_argument("--wheel", type=Path, help="an allennlp-0.9.0 wheel already downloaded (no pip call)")
    args = parser.parse_args(argv)
    if (args.target / "allennlp" / "modules" / "elmo.py").is_file():
        print(f"{args.target}: already there")
        return 0
    args.target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        wheel = args.wheel
        if wheel is None:
            done = subprocess.run([sys.executable, "-m", "pip", "download", f"allennlp=={VERSION}", "--no-deps",
                                   "--only-binary", ":all:", "-q", "-d", folder], capture_output=True, text=True)
            wheels = sorted(Path(folder).glob(f"allennlp-{VERSION}-*.whl"))
            if done.returncode != 0 or not wheels:
                raise SystemExit(f"pip download allennlp=={VERSION} failed: {done.stderr.strip()[-500:]}")
            wheel = wheels[0]
        size = unpack(wheel, args.target)
    print(f"{args.target}: AllenNLP {VERSION}'s code, {size / 2 ** 20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
