"""Adapters for other frameworks' pipelines (each imports its framework only when used):
:mod:`elmo.integrations.ray` for Ray Data."""
