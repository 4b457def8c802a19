"""The ``elmo`` command line: one module per verb, each a thin layer over the Python API."""
