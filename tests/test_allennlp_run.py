"""``python -m elmo.allennlp run CONSOLE_SCRIPT ARGS...``: an installed command that imports
``allennlp`` when its module loads (as SeqVec's ``seqvec`` does) runs unchanged on the drop-in.
The stand-in is a real distribution: a package and its ``.dist-info`` with a console-script entry
point, on ``PYTHONPATH`` for the subprocess, as ``pip install`` would lay it out."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
from conftest import ALLENNLP

ROOT = Path(__file__).resolve().parent.parent

# What seqvec/seqvec.py does: AllenNLP imported at module level, then ElmoEmbedder on the files given.
STAND_IN = """
import os
import sys

from allennlp.commands.elmo import ElmoEmbedder


def main():
    options, weights, output = sys.argv[1:4]
    embedder = ElmoEmbedder(options, weights, cuda_device=-1)
    vectors = embedder.embed_sentence(sys.argv[4:])
    import numpy
    numpy.save(output, vectors)
    print(sys.argv[0], vectors.shape)
    return int(os.environ.get("STANDIN_EXIT", "0"))
"""


def install_stand_in(site: Path) -> None:
    """``seqvec_standin`` 0.1, with the console script ``seqvec-standin``, installed into ``site``."""
    (site / "seqvec_standin").mkdir(parents=True)
    (site / "seqvec_standin" / "__init__.py").write_text(textwrap.dedent(STAND_IN))
    info = site / "seqvec_standin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: seqvec-standin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[console_scripts]\nseqvec-standin = seqvec_standin:main\n")


def run(tmp_path: Path, *args: str, path: str | None = None, **variables: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT / "src")]), **variables)
    if path is not None:
        env["PATH"] = path + os.pathsep + env["PATH"]
    return subprocess.run([sys.executable, "-m", "elmo.allennlp", "run", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)


def test_an_installed_console_script_that_imports_allennlp_runs_unchanged(tmp_path):
    install_stand_in(tmp_path / "site")
    files = [str(ALLENNLP / "options.json"), str(ALLENNLP / "lm_weights.hdf5")]
    sentence = json.loads((ALLENNLP / "sentences.json").read_text())[0][0].split()
    done = run(tmp_path, "seqvec-standin", *files, "out.npy", *sentence, STANDIN_EXIT="3")
    assert done.returncode == 3, done.stderr  # the command's own exit status
    assert done.stdout.strip() == f"seqvec-standin (3, {len(sentence)}, 32)"  # sys.argv as the command sees it
    # AllenNLP's own numbers for this sentence, the first of a run (zero state): its top layer.
    top = np.load(tmp_path / "out.npy")[-1]
    with h5py.File(ALLENNLP / "lm_embeddings_0.hdf5") as f:
        expected = f["0"][...]  # (2, tokens, 16): forward, backward
    assert np.abs(np.stack([top[:, :16], top[:, 16:]]) - expected).max() < 1e-5


def test_a_python_script_on_path_runs_too(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "legacy-elmo"
    script.write_text("#!/usr/bin/env python\nimport sys\nfrom allennlp.modules.elmo import batch_to_ids\n"
                      "print(sys.argv[1:], tuple(batch_to_ids([['a', 'b']]).shape))\n")
    script.chmod(0o755)
    done = run(tmp_path, "legacy-elmo", "--flag", "x", path=str(bin_dir))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['--flag', 'x'] (1, 2, 50)"


def test_a_missing_command_is_one_line(capsys):
    from elmo.allennlp.run import main

    assert main(["no-such-command-anywhere"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m elmo.allennlp run: error: no-such-command-anywhere: no such command")
    assert len(err.strip().splitlines()) == 1
    assert main([]) == 2 and capsys.readouterr().err.startswith("usage: python -m elmo.allennlp run CONSOLE_SCRIPT")
