"""The one check of each kind of number a user gives: :func:`check_count` for an integer (a batch
size, a token budget, a number of epochs or layers) and :func:`check_number` for a real number
(a learning rate, a dropout, a time). Every entry uses them, the library's arguments, elmo's
options, the AllenNLP command, the server and a task config's fields, so that a bad value gets
the same one-line error wherever it enters, naming the argument, option or field it came from.
A leaf: it imports nothing of the package, so that every room may import it.
"""

from __future__ import annotations

import math
import numbers
import sys


def _shown(value: object) -> str:
    """A value as an error shows it: a number as it is usually written (-1, 0.5, nan), anything
    else as its repr (``'8'``, ``None``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return repr(value)
    if isinstance(value, numbers.Integral) and abs(value) >= 10**15:
        return f"an integer of {len(str(abs(value)))} digits"  # (a float cannot show it: OverflowError)
    return f"{value:g}" if isinstance(value, float) else str(value)


def check_count(value: int, name: str, least: int = 1, most: int | None = None) -> int:
    """``value`` if it is an integer of at least ``least`` (and, with ``most``, at most ``most``),
    else a ValueError naming ``name`` (the argument, the command-line option or the config field
    that gave it): the one check of a batch size, and of every other count. A 0 where the least
    is 1 is an error, never a default."""
    bound = f"at least {least}" + (f" and at most {most}" if most is not None else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: must be {bound}, got {_shown(value)}, which is not an integer")
    if value < least or (most is not None and value > most):
        raise ValueError(f"{name}: must be {bound}, got {_shown(value)}")
    return value


def check_number(value: float, name: str, least: float = 0.0, *, above: bool = False,
                 below: float | None = None) -> float:
    """``value`` if it is a finite real number of at least ``least`` (with ``above``: more than
    ``least``) and, with ``below``, less than ``below``; else a ValueError naming ``name``, as
    :func:`check_count`. A dropout is ``check_number(p, name, 0, below=1)``."""
    bound = f"{'above' if above else 'at least'} {least:g}" + (f" and below {below:g}" if below is not None else "")
    # An integer past float's range (a 400-digit one) is no usable real number either; testing it
    # with math.isfinite would raise OverflowError instead of saying so.
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or (abs(value) > sys.float_info.max if isinstance(value, numbers.Integral) else not math.isfinite(value))):
        raise ValueError(f"{name}: must be {bound}, got {_shown(value)}, which is not a finite number")
    if value < least or (above and value == least) or (below is not None and value >= below):
        raise ValueError(f"{name}: must be {bound}, got {_shown(value)}")
    return value


class NonFiniteOutputError(ValueError):
    """The last guard of "finite numbers in, finite numbers out": a batch whose vectors hold NaN or
    infinite values (weights whose products overflow float32 on this input), raised instead of
    returning or writing them. ``row``: the sentence's index in its batch, which the caller turns
    into the sentence's number or the file's line (:meth:`at`)."""

    def __init__(self, row: int, where: str = ""):
        self.row, self.where = row, where
        place = f"{where}: " if where else f"sentence {row} of the batch: "
        super().__init__(f"{place}its vectors hold NaN or infinite values (the model's weights overflow float32 on "
                         "this input?); nothing was written for it")

    def at(self, where: str) -> NonFiniteOutputError:
        """The same error, naming ``where`` (``"in.txt:12"``, ``"sentence 3"``)."""
        return NonFiniteOutputError(self.row, where)

    def __reduce__(self):
        return type(self), (self.row, self.where)
