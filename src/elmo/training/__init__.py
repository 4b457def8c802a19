"""Training the biLM: corpus preparation, language-model windows and batching, the training loop
(checkpoints, resume, data parallel) and held-out evaluation."""
