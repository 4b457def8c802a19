"""The paper's network and what describes it: :mod:`~elmo.model.network` (the specification: the
character CNN token encoder, the LSTM with projection, the biLM, the scalar mix), its config
(``options.json``), byte ids and character dictionaries, word vocabularies, and the bilm-tf HDF5
weight layout. Its fast paths are :mod:`elmo.kernels`, the language model it trains as
:mod:`elmo.lm.model`."""
