"""The GPU lease's python has PyTorch 2.11 (CI has a newer one): every torch name the GPU
suite's scripts call must exist in 2.11, or a lease is spent on an AttributeError. The names
are read from the scripts and checked against a list of names known to exist in 2.11.

How the list was established (no 2.11 wheel here: it is too large to fetch for a test): each
name either ran on the H200 in the suite's earlier runs under torch 2.11.0+cu130
(results/benchmarks/gpu_suite-h200-*.json record the rows that needed it), or is older than
2.11 by PyTorch's release notes (the version given is the release that introduced it). A name
the scripts start to use must be added here with its evidence."""

import ast
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# The driver, its sections' modules (benchmarks/gpu/) and the scripts it runs on the lease.
SCRIPTS = ("gpu_suite.py", "pytest_progress.py", "allennlp_embed.py", "gpu_lease_prepare.py",
           *sorted(p.relative_to(ROOT / "benchmarks").as_posix() for p in (ROOT / "benchmarks" / "gpu").glob("*.py")))
H200 = "ran on the H200 under 2.11.0+cu130"
IN_2_11 = {
    "torch.__version__": H200, "torch.version.cuda": H200, "torch.device": H200,
    "torch.autograd.DeviceType.CUDA": H200 + " (cuda_kernels of every training row)",
    "torch.autograd.grad": H200 + " (exactness of training)",
    "torch.backends.cuda.matmul.allow_tf32": H200 + " (tf32_defaults)",
    "torch.backends.cudnn.allow_tf32": H200 + " (tf32_defaults: True)",
    "torch.backends.cudnn.is_available": H200, "torch.backends.cudnn.version": H200 + " (cuDNN 91900)",
    "torch.bfloat16": H200, "torch.float16": H200, "torch.float32": H200, "torch.bool": H200,
    "torch.compile": H200 + " (fused+compile rows); since 2.0",
    "torch.cuda.device_count": H200, "torch.cuda.empty_cache": H200, "torch.cuda.get_device_properties": H200,
    "torch.cuda.is_available": H200, "torch.cuda.synchronize": H200,
    "torch.cuda.make_graphed_callables": H200 + " (fused+graphs rows); since 1.10",
    "torch.cuda.max_memory_allocated": H200 + " (peak GiB)", "torch.cuda.reset_peak_memory_stats": H200,
    "torch.autocast": "since 1.10 (the trainer's own autocast ran on the H200)", "torch.enable_grad": H200, "torch.no_grad": H200, "torch.inference_mode": H200 + "; since 1.9",
    "torch.get_float32_matmul_precision": "since 1.12", "torch.get_num_threads": H200,
    "torch.set_num_threads": "since 0.x", "torch.manual_seed": H200, "torch.ones": H200, "torch.randn": H200, "torch.randn_like": H200, "torch.stack": H200,
    "torch.profiler": H200 + " (profiled steps); since 1.8.1", "torch.profiler.profile": H200,
    "torch.profiler.ProfilerActivity": H200,
}


def torch_names(path: Path) -> set[str]:
    """Every dotted name starting at ``torch`` in the script: attribute chains (the longest) and
    names imported from torch's modules."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names, inner = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                parts.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id == "torch":
                names.add(".".join(["torch", *reversed(parts)]))
                # the chain's own prefixes are not names of their own
                for k in range(1, len(parts)):
                    inner.add(".".join(["torch", *reversed(parts[k:])]))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names - inner


def test_every_torch_name_of_the_suite_exists_in_2_11():
    used = set().union(*(torch_names(ROOT / "benchmarks" / name) for name in SCRIPTS))
    assert "torch.cuda.make_graphed_callables" in used  # the reading works
    assert {"gpu/common.py", "gpu/train.py", "gpu/embed.py"} <= set(SCRIPTS)  # every module of the suite is read
    unknown = sorted(used - set(IN_2_11))
    assert not unknown, f"torch names not known to exist in 2.11 (add each with its evidence): {unknown}"


def test_the_recorded_names_exist_in_this_torch_too():
    for name in IN_2_11:
        parts = name.split(".")
        value = torch
        for part in parts[1:]:
            if not hasattr(value, part):
                __import__(".".join(parts[:parts.index(part) + 1]))
            value = getattr(value, part)
