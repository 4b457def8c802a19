"""Downstream tasks: readers for the tagging, classification and inference data sets ELMo is
evaluated on (see :mod:`elmo.tasks.readers`)."""
