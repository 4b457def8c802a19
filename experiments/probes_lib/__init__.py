"""The code of ``experiments/probes.py`` that is not a command: what each biLM layer captures.

* :mod:`probes_lib.wsd`: word-sense disambiguation by nearest SemCor sense centroid (Table 5);
* :mod:`probes_lib.linear`: linear POS probes on one frozen layer (Table 6).

It serves that experiment only, so it lives beside it rather than in the ``elmo`` package;
``experiments/probes.py`` puts its own folder on ``sys.path`` to import it, and the tests load
these modules by path (``tests/conftest.py``'s ``load_experiment``).
"""
