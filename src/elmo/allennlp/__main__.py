"""``python -m elmo.allennlp elmo INPUT OUTPUT (--all|--top|--average) ...``: AllenNLP's
``allennlp elmo`` command (see :mod:`elmo.cli.allennlp_elmo`)."""

import sys

from elmo.cli.allennlp_elmo import main

if __name__ == "__main__":
    sys.exit(main())
