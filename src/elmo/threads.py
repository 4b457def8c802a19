"""How many CPU threads elmo computes with, and how they wait: the one policy every verb, the
library and the server follow.

* **Waiting.** PyTorch's OpenMP threads (GNU libgomp in the PyPI wheels) spin for a while at the
  end of every parallel region before they sleep. On cores that are not theirs (a shared VM, CI,
  other jobs) a spinning thread holds the core its descheduled sibling needs, and every operator
  waits for that sibling: on a 2-core machine with other jobs running, a 300-line ``elmo embed``
  took 69 s at the default threads against 13 s with passive waiting (docs/speed.md, "Under
  contention"). On quiet cores the spin is what makes small operators fast (passive waiting cost
  2.46x there). :func:`prepare_openmp` asks for passive waiting (``OMP_WAIT_POLICY=PASSIVE``)
  before PyTorch is first imported where other tasks are running (:func:`others_load`), unless
  the user chose a wait policy (``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT``, or Intel OpenMP's
  ``KMP_BLOCKTIME``): the OpenMP runtime reads them once, when it loads, so afterwards nothing
  can be changed (and nothing is).
* **How many.** :func:`available_cpus`: the CPUs this process may run on (its affinity mask,
  ``taskset``/``cpuset``) and, under a container's CPU quota (cgroup v2 ``cpu.max``, v1
  ``cpu.cfs_quota_us``), no more than the quota rounded up. The default thread count is that,
  or ``$OMP_NUM_THREADS`` where the user set it; ``--threads`` may ask for 1 up to the CPUs of
  the affinity mask (:func:`check_threads`: more cannot run at once, and a huge count aborts the
  OpenMP runtime).

A leaf apart from :mod:`elmo.checks`: it imports neither PyTorch nor the rest of the package, so
that :mod:`elmo` can apply it before anything loads PyTorch.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import MutableMapping

from elmo.checks import check_count

# Variables by which a user chooses how OpenMP threads wait (GNU and Intel OpenMP); any of them
# set means the user decided, and elmo leaves the wait policy alone.
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
WAIT_POLICY = "PASSIVE"
CGROUP_ROOT = "/sys/fs/cgroup"


def others_load(loadavg: str | None = None, samples: int = 5) -> float:
    """How many cores other work keeps busy now: the tasks running besides this process, by the
    fourth field of ``/proc/loadavg`` (``loadavg``: one reading's text, for tests), the median of
    ``samples`` readings a millisecond apart so that a passing task does not count. Not the load
    average: it still holds elmo's own previous command for a minute, and would take the second
    of two runs in a row for a busy machine. Where it cannot be read, ``inf``: taken as busy."""
    readings = []
    for i in range(1 if loadavg is not None else samples):
        if i:
            time.sleep(0.001)
        text = _read("/proc/loadavg") if loadavg is None else loadavg
        try:
            readings.append(int((text or "").split()[3].split("/")[0]) - 1)
        except (IndexError, ValueError):
            return math.inf
    return float(sorted(readings)[len(readings) // 2])


def prepare_openmp(environ: MutableMapping[str, str] | None = None, load: float | None = None) -> bool:
    """Ask for passive OpenMP waiting (``OMP_WAIT_POLICY=PASSIVE`` in ``environ``, default
    ``os.environ``) when other work already needs the cores this process's threads would take,
    if PyTorch is not loaded yet and the user set none of :data:`WAIT_VARIABLES`. Returns whether
    it set it; children started later inherit it.

    The machine counts as busy when ``load`` (default :func:`others_load`: other tasks running
    now) is more than half a core beyond the CPUs our threads leave free. Both choices are measured (docs/speed.md, "Under
    contention"): on busy cores, OpenMP's spinning threads hold the cores their descheduled
    siblings need (``elmo embed`` 2.09x and ``elmo train`` 3.05x slower than their best thread
    count, passive waiting: within 1.29x); on quiet ones, passive waiting makes every parallel
    region wake sleeping threads (the packaged model's ``elmo embed`` about 2x slower, the small
    size in-process 2.6x), so there OpenMP's own spin-then-sleep default stays."""
    global LAST_DECISION
    environ = os.environ if environ is None else environ
    if "torch" in sys.modules or any(name in environ for name in WAIT_VARIABLES):
        return False
    load = others_load() if load is None else load
    cpus = available_cpus()
    threads = min(default_threads(environ), cpus)
    busy = load > cpus - threads + 0.5
    LAST_DECISION = {"load": load, "cpus": cpus, "threads": threads, "passive": busy}
    if busy:
        environ["OMP_WAIT_POLICY"] = WAIT_POLICY
    return busy


# What prepare_openmp saw and chose when it last decided (None: the user had chosen, or PyTorch was
# already loaded), for a user asking why, and for the tests.
LAST_DECISION: dict | None = None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read(4096)
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_paths(root: str, proc_cgroup: str) -> tuple[list[str], list[str]]:
    """This process's cgroup v2 folders (its own, then each parent up to ``root``) and its v1 cpu
    controller folders, from ``/proc/self/cgroup``'s text; the root itself last in each."""
    v2, v1 = [], []
    for line in (_read(proc_cgroup) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        path = path.strip().lstrip("/")
        if controllers == "":
            folder = os.path.join(root, path) if path else root
            while True:
                v2.append(folder)
                if os.path.normpath(folder) == os.path.normpath(root):
                    break
                folder = os.path.dirname(folder)
        elif "cpu" in controllers.split(","):
            for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                base = os.path.join(root, name)
                v1 += [os.path.join(base, path), base] if path else [base]
    if not v2:
        v2.append(root)
    if not v1:
        v1 += [os.path.join(root, "cpu"), os.path.join(root, "cpu,cpuacct")]
    return v2, v1


def cgroup_cpu_quota(root: str = CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> float | None:
    """The CPUs' worth of time this process's cgroup may use (``quota / period``: 1.5 for
    ``150000 100000``), the least over its cgroup and their parents; None where no quota is set
    or none can be read (not Linux, no cgroup file system)."""
    v2, v1 = _cgroup_paths(root, proc_cgroup)
    quotas = []
    for folder in v2:
        fields = (_read(os.path.join(folder, "cpu.max")) or "").split()
        if len(fields) == 2 and fields[0] != "max":
            try:
                quota, period = int(fields[0]), int(fields[1])
            except ValueError:
                continue
            if quota > 0 and period > 0:
                quotas.append(quota / period)
    for folder in v1:
        try:
            quota = int((_read(os.path.join(folder, "cpu.cfs_quota_us")) or "x").strip())
            period = int((_read(os.path.join(folder, "cpu.cfs_period_us")) or "x").strip())
        except ValueError:
            continue
        if quota > 0 and period > 0:  # -1: no quota
            quotas.append(quota / period)
    return min(quotas) if quotas else None


def affinity_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (``taskset``, a cpuset), else every
    CPU of the machine."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def available_cpus(root: str = CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> int:
    """The CPUs this process can keep busy: :func:`affinity_cpus`, but no more than its cgroup's
    CPU quota rounded up (:func:`cgroup_cpu_quota`); at least 1."""
    cpus = affinity_cpus()
    quota = cgroup_cpu_quota(root, proc_cgroup)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota - 1e-9)))
    return cpus


def _environment_threads(environ: MutableMapping[str, str]) -> int | None:
    """``OMP_NUM_THREADS``'s first level as a positive integer, or None (unset or not one)."""
    value = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def default_threads(environ: MutableMapping[str, str] | None = None) -> int:
    """The thread count elmo computes with when ``--threads`` is not given: ``$OMP_NUM_THREADS``
    where the user set it, else :func:`available_cpus`."""
    environ = os.environ if environ is None else environ
    return _environment_threads(environ) or available_cpus()


def threads_help(what: str = "CPU threads") -> str:
    """The help of a verb's ``--threads``: what it is and where its default comes from (with this
    process's value), the same on every verb."""
    return (f"{what}, 1 to {affinity_cpus()} here (default: $OMP_NUM_THREADS if set, else the CPUs this "
            f"process may use, its affinity mask at most its cgroup's CPU quota: {default_threads()} here)")


def check_threads(threads: int, option: str = "--threads") -> int:
    """``threads`` if it is an integer from 1 to the CPUs this process may run on
    (:func:`affinity_cpus`), else a ValueError naming ``option``: the one check of a thread
    count, before the OpenMP runtime sees it."""
    return check_count(threads, option, 1, most=affinity_cpus())


def set_threads(threads: int | None = None, option: str = "--threads") -> int:
    """Make PyTorch compute with ``threads`` threads (checked by :func:`check_threads`); when
    None, with no more than :func:`default_threads` (PyTorch's own default counts every CPU of the
    affinity mask, not the cgroup's quota; a count a caller set lower stays). Returns the count.
    Imports PyTorch."""
    import torch

    count = check_threads(threads, option) if threads is not None else min(default_threads(), torch.get_num_threads())
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    return count


def add_threads_argument(parser, what: str = "CPU threads") -> None:
    """A verb's ``--threads``: the one option, help and default (None: :func:`default_threads`)."""
    parser.add_argument("--threads", type=int, default=None, metavar="N", help=threads_help(what))


__all__ = ["WAIT_VARIABLES", "add_threads_argument", "affinity_cpus", "available_cpus", "cgroup_cpu_quota",
           "check_threads", "default_threads", "prepare_openmp", "set_threads", "threads_help"]
