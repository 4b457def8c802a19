"""Training the biLM: corpus preparation, the language model (the biLM and its sampled softmax),
language-model windows and batching, the training loop (checkpoints, resume, data parallel) and
held-out evaluation."""
