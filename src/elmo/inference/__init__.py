"""Running a trained biLM: the runtime (device, caches), the precision rule, the LSTM state
policies, the in-memory ``Embedder`` and the file pipeline over it (``FileEmbedder``), the
task-facing ``Elmo``, the vocabulary and layer caches, contextual neighbours."""
