"""AllenNLP 0.9's own ``ElmoEmbedder`` on a text file, for whole-process comparisons.

AllenNLP no longer installs (its pins need Python 3.6-3.8 and torch 1.x), but its ELMo code
runs on today's PyTorch unchanged. This script runs that code from an unpacked release wheel,
exactly as ``allennlp elmo --all TEXT OUT --options-file OPTIONS --weight-file WEIGHTS`` would:
one sentence per line, split on spaces, batches of ``--batch-size`` consecutive lines, every
layer written to HDF5 under the line's index.

Nothing of AllenNLP's numerics is changed. Only its imports are trimmed, which makes its
start-up *shorter* than a real install's, so any comparison leans in AllenNLP's favour:

* the package ``__init__`` files of ``allennlp``, ``allennlp.commands`` and ``allennlp.modules``
  are skipped (they import every model, command and module of the library);
* third-party packages the ELMo code never calls (spaCy, ``overrides``, NLTK, boto3 ...) are
  replaced by empty stand-ins when they are not installed, and with ``--lean`` even when they are
  (AllenNLP's leanest start-up: on the development machine NLTK alone took 1.0 s of its imports).

Get the code once (any machine with PyPI)::

    pip download allennlp==0.9.0 --no-deps -d "$WORK"
    python -m zipfile -e "$WORK/allennlp-0.9.0-py3-none-any.whl" "$WORK/allennlp-0.9.0"

Run (``benchmarks/embed_speed.py --allennlp-src`` and ``benchmarks/startup.py --allennlp-src``
call it)::

    python benchmarks/allennlp_embed.py --allennlp-src "$WORK/allennlp-0.9.0" \
        OPTIONS.json WEIGHTS.hdf5 TEXT OUT.hdf5 --batch-size 64 [--cuda-device 0]
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

# Third-party packages AllenNLP 0.9 imports at module level on the way to its ELMo code but
# never calls there. Each is stood in for only when it is not installed.
UNUSED_PACKAGES = ("spacy", "overrides", "jsonpickle", "editdistance", "unidecode", "sqlparse",
                   "parsimonious", "word2number", "pytorch_pretrained_bert", "pytorch_transformers",
                   "_jsonnet", "tensorboardX", "gevent", "numpydoc", "pytz", "boto3", "botocore",
                   "requests", "ftfy", "nltk", "conllu", "flask", "flask_cors", "sklearn", "scipy",
                   "matplotlib", "responses", "awscli", "jsonnet", "psycopg2", "flaky")

# AllenNLP packages whose __init__ would import the whole library.
BARE_PACKAGES = ("allennlp", "allennlp.commands", "allennlp.modules")


class _Anything:
    """Stands in for any attribute of a missing package: a class to subclass, a decorator
    that returns what it decorates, a value to compare."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else _Anything()

    def __getattr__(self, name):
        return _Anything()

    def __mro_entries__(self, bases):
        return (object,)


class _StandInModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves an empty module for a package of ``UNUSED_PACKAGES`` (and its submodules): for a
    missing one, or (``lean``) for every one."""

    def __init__(self, lean: bool):
        self.lean = lean

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in UNUSED_PACKAGES:
            return None
        if self.lean:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        for finder in sys.meta_path:
            if finder is not self and getattr(finder, "find_spec", None):
                try:
                    if finder.find_spec(fullname, path, target) is not None:
                        return None  # installed: use the real one
                except (ImportError, ValueError):
                    continue
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def import_allennlp(source: str, lean: bool = False):
    """AllenNLP's ``ElmoEmbedder`` class, imported from the unpacked wheel at ``source``; ``lean``:
    every unused package stood in, installed or not."""
    package = os.path.join(source, "allennlp")
    if not os.path.isfile(os.path.join(package, "modules", "elmo.py")):
        raise SystemExit(f"--allennlp-src {source}: no allennlp/modules/elmo.py there "
                         "(unpack allennlp-0.9.0-py3-none-any.whl into it)")
    sys.path.insert(0, source)
    if lean:
        sys.meta_path.insert(0, _StandInFinder(lean=True))
    else:
        sys.meta_path.append(_StandInFinder(lean=False))
    for name in BARE_PACKAGES:
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(source, *name.split("."))]
        sys.modules[name] = module
    from allennlp.commands.elmo import ElmoEmbedder
    return ElmoEmbedder


def allennlp_command(source: str, options: str, weights: str, text: str, output: str, *extra: str) -> list[str]:
    """The command line that runs this script on those files with AllenNLP's code from
    ``source``, for the benchmarks that time it as a whole process."""
    return [sys.executable, os.path.abspath(__file__), "--allennlp-src", source, options, weights, text, output,
            *extra]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--allennlp-src", required=True, help="an unpacked allennlp 0.9.0 wheel")
    parser.add_argument("options")
    parser.add_argument("weights")
    parser.add_argument("text", help="one sentence per line, tokens separated by spaces")
    parser.add_argument("output", help="HDF5 file to write (every layer, as allennlp elmo --all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--cuda-device", type=int, default=-1,
                        help="the GPU to run on, as AllenNLP's own --cuda-device (default: -1, the CPU)")
    parser.add_argument("--lean", action="store_true",
                        help="stand in for every package the ELMo code never calls, even installed ones")
    args = parser.parse_args(argv)
    ElmoEmbedder = import_allennlp(args.allennlp_src, lean=args.lean)
    embedder = ElmoEmbedder(options_file=args.options, weight_file=args.weights, cuda_device=args.cuda_device)
    with open(args.text, encoding="utf-8") as text:
        embedder.embed_file(text, args.output, output_format="all", batch_size=args.batch_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
