"""The GPU suite's sections, one module each, and what they share; ``benchmarks/gpu_suite.py`` is
the driver that runs them, each in a process of its own under its own limit.

* :mod:`gpu.common`: paths, process groups, a section's record and clock, the device, generated
  text, fixtures, matmul peaks and kernel counts, running a section alone.
* :mod:`gpu.environment`, :mod:`gpu.exactness`, :mod:`gpu.cuda_tests`, :mod:`gpu.train`
  (``train_original``, ``train_packaged``, ``train_process``, ``host_step``), :mod:`gpu.embed`
  (``embed``, ``embed_process``), :mod:`gpu.allennlp`, :mod:`gpu.host_cpu`: the sections, each
  module's ``RUNS`` naming those it holds.
* :mod:`gpu.report`: the tables of a report, as text or Markdown.

With benchmarks/ on the path (the driver puts it there), ``from gpu import embed``; each section
module also runs alone, e.g. ``PYTHONPATH=src python benchmarks/gpu/embed.py --device cpu --quick
--out embed.json`` (:func:`gpu.common.run_alone`).
"""
