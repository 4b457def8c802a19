"""The biLM as a language model: :mod:`elmo.lm.model` (the biLM with its shared softmax, the
loss a window of text gives, trained through the kernels' fast paths) and :mod:`elmo.lm.softmax`
(the full or sampled softmax). Its own room between the kernels and the hub, because the hub
builds, reads and writes language models and training builds on the hub."""
