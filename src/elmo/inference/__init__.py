"""Running a trained biLM: the runtime (device, precision, caches), the LSTM state policies, the
``Embedder``, the task-facing ``Elmo``, the vocabulary and layer caches, contextual neighbours."""
