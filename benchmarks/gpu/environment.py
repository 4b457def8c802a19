"""The ``environment`` section: GPU, driver, torch/CUDA/cuDNN, CPU; measured fp32, TF32, bf16 and
fp16 matmul peaks.

    PYTHONPATH=src python benchmarks/gpu/environment.py --device cpu --quick --out environment.json
"""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path

if __name__ == "__main__":  # run alone: benchmarks/ on the path in this folder's place (there `gpu` is a
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # package; here gpu/common.py would hide common.py)

from gpu.common import Device, Recorder, measured_peaks, run_alone, run_group


def section_environment(rec: Recorder, args) -> None:
    import torch

    device = Device(args.device)
    env = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "cpu": cpu_name(), "cpu_cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
           "cpu_vector_flags": sorted(cpu_vector_flags()),
           "tf32_defaults": {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32,
                             "float32_matmul_precision": torch.get_float32_matmul_precision()}}
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:  # not installed (CPU builds)
        env["triton"] = None
    if device.cuda:
        properties = torch.cuda.get_device_properties(0)
        env.update({"gpu": properties.name, "gpu_memory_gib": round(properties.total_memory / 2 ** 30, 1),
                    "gpu_count": torch.cuda.device_count(), "compute_capability": f"{properties.major}.{properties.minor}",
                    "driver": nvidia_smi("driver_version")})
    rec.set("environment", env)
    peaks = measured_peaks(device, args.quick)
    rec.set("matmul_peak_tflops", {k: round(v / 1e12, 3) for k, v in peaks.items()})


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def cpu_vector_flags() -> set[str]:
    from elmo.inference.precision import cpu_flags

    return {f for f in (cpu_flags() or set()) if re.match(r"(avx|amx|fma|sse4|f16c)", f)}


def nvidia_smi(field: str) -> str | None:
    try:
        done = run_group(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], 20)
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
    except OSError:
        return None


# This module's sections by name: the driver's child runs them from here, run_alone by --section.
RUNS = {"environment": section_environment}

if __name__ == "__main__":
    sys.exit(run_alone(RUNS))
