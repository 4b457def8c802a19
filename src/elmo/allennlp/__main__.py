"""``python -m elmo.allennlp elmo INPUT OUTPUT (--all|--top|--average) ...``: AllenNLP's
``allennlp elmo`` command (see :mod:`elmo.allennlp.command`)."""

import sys

from elmo.allennlp.command import main

if __name__ == "__main__":
    sys.exit(main())
