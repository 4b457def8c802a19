"""``python -m elmo.allennlp elmo INPUT OUTPUT (--all|--top|--average) ...``: AllenNLP's
``allennlp elmo`` command (see :mod:`elmo.allennlp.command`); ``python -m elmo.allennlp run
CONSOLE_SCRIPT ARGS...``: another library's command that imports AllenNLP, on the drop-in
(:mod:`elmo.allennlp.run`)."""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        from elmo.allennlp.run import main as run

        sys.exit(run(sys.argv[2:]))
    from elmo.allennlp.command import main

    sys.exit(main())
