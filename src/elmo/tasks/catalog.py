"""The task families by name, and the data sets they read by kind.

:data:`TASKS` is the one place that lists the task families: a config's ``task`` is a key of it,
and each value is the :class:`~elmo.tasks.base.Task` subclass of that family's module. A new task
is one module plus one line here. The dataset kinds are the union of the families' ``readers``:
each kind belongs to exactly one family.
"""

from __future__ import annotations

from elmo.tasks.base import ModelSettings, Task
from elmo.tasks.classification import Classification
from elmo.tasks.coref import Coreference
from elmo.tasks.entailment import Entailment
from elmo.tasks.qa import ReadingComprehension
from elmo.tasks.readers import PathLike
from elmo.tasks.relatedness import Relatedness
from elmo.tasks.srl import SemanticRoles
from elmo.tasks.tagging import Tagging

TASKS: dict[str, type[Task]] = {
    "tagging": Tagging,
    "classification": Classification,
    "entailment": Entailment,
    "relatedness": Relatedness,
    "srl": SemanticRoles,
    "coref": Coreference,
    "qa": ReadingComprehension,
}

# dataset kind -> the family that reads it
KIND_TASKS: dict[str, type[Task]] = {kind: task for task in TASKS.values() for kind in task.readers}
DATASET_KINDS = tuple(KIND_TASKS)


def task_for(config) -> Task:
    """The task object of a :class:`~elmo.tasks.config.TaskConfig` (its family, ``[model]``
    settings and metric)."""
    return TASKS[config.task](config.model, config.metric)


def make_task(name: str, settings: ModelSettings | None = None, metric: str | None = None) -> Task:
    """The task object of family ``name`` (default settings and metric where not given)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(TASKS)}")
    return TASKS[name](settings, metric)


def read_dataset(kind: str, path: PathLike, split: str | None = None) -> list:
    """The examples of a data set, read by its kind's reader (see each family's ``readers``).

    Most kinds read one file per split: ``path`` is the split's file and ``split`` must be None.
    Kinds whose file or folder holds several splits (``conll2000``: ``conll2000.zip`` with
    train/test; ``ptb-sample``: ``treebank.zip`` with train/dev/test; ``sick`` and
    ``sick-relatedness``: ``SICK.txt`` with train/trial/test; ``snli``: the folder with dev/test;
    ``litbank``: the folder with train/dev/test) require ``split``.
    """
    if kind not in KIND_TASKS:
        raise ValueError(f"unknown dataset kind {kind!r}; known: {', '.join(DATASET_KINDS)}")
    reader, takes_split = KIND_TASKS[kind].readers[kind]
    if not takes_split:
        if split is not None:
            raise ValueError(f"{kind}: pass the split's file as path and no split (got split={split!r})")
        return reader(path)
    if split is None:
        raise ValueError(f"{kind}: a split is required")
    return reader(path, split)


__all__ = ["DATASET_KINDS", "KIND_TASKS", "TASKS", "make_task", "read_dataset", "task_for"]
