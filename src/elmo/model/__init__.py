"""The paper's network: its config (``options.json``), byte ids, the character CNN token
encoder, the LSTM layer (specification and fast paths), the biLM, the softmax, the scalar mix, the
language model, its vocabulary, and the bilm-tf HDF5 weight layout."""
