"""Downstream tasks with and without ELMo: one module per task family.

``base`` (the :class:`~elmo.tasks.base.Task` interface and what the families share), ``catalog``
(the families by name, the data sets by kind), ``config`` (the TOML run config), ``training``
(the one loop: train, resume, evaluate), ``readers`` (what several families' readers share),
``features`` (word vectors and the task's character CNN), ``integration`` (where ELMo goes and
how its layers mix), ``masked`` (masked building blocks); and the families: ``tagging``,
``classification``, ``entailment``, ``relatedness``, ``srl``, ``coref``, ``qa``."""
