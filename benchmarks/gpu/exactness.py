"""The ``exactness`` section: every fast path (training: each LSTM path's outputs and gradients,
the CUDA graph of the training window on its top layer; inference: eager, CUDA graphs) against
the CPU plain path on the parity fixtures; and the training paths the training sections share.

    PYTHONPATH=src python benchmarks/gpu/exactness.py --device cpu --quick --out exactness.json
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # run alone: benchmarks/ on the path in this folder's place (there `gpu` is a
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # package; here gpu/common.py would hide common.py)

from gpu.common import Deadline, Device, OutOfTime, Recorder, fixture_model, fixture_sentences, run_alone


def training_paths() -> list[str]:
    """The LSTM paths of training in this checkout, default first: the model's fast paths
    (``elmo.model.network.LSTM_PATHS``, its default first), "fused+graphs" (the training window as
    CUDA graphs) and "fused+compile" (the cells through torch.compile) where the model has them,
    and "plain" (the specification) last. The same list on any device: :meth:`Device.why_not`
    says which run."""
    import inspect

    from elmo.model import network as bilm
    from elmo.lm import model as lm

    default = getattr(bilm, "DEFAULT_LSTM_PATH", "fast")
    fast = [p for p in getattr(bilm, "LSTM_PATHS", ("plain", "fast")) if p != "plain"]
    paths = [default] + [p for p in fast if p != default]
    if "fused" in fast:
        if hasattr(lm.LanguageModel, "use_cuda_graphs"):
            paths.insert(paths.index("fused") + 1, "fused+graphs")
        if "compile_cells" in inspect.signature(bilm.BiLM).parameters:
            paths.append("fused+compile")
    return paths + ["plain"]


def path_needs(path: str) -> str | None:
    """What a training path needs beyond a CPU (:meth:`Device.why_not`): compiled cells need
    torch.compile's kernels; the window's CUDA graphs run eager on a CPU, so they need nothing."""
    return "compile" if "compile" in path else None


@contextlib.contextmanager
def training_path(model, name: str, trainer=None):
    """``model`` (a LanguageModel or a BiLM; ``trainer``'s, when given) trains on LSTM path
    ``name`` within the block; everything is restored after."""
    bilm = getattr(model, "bilm", model)
    saved = {k: getattr(bilm, k) for k in ("lstm_path", "compile_cells", "fast") if hasattr(bilm, k)}
    graphs = False
    try:
        base, *extras = name.split("+")
        if hasattr(bilm, "lstm_path"):
            bilm.lstm_path = base
            if hasattr(bilm, "compile_cells"):
                bilm.compile_cells = "compile" in extras
        else:  # before the LSTM paths: fast or plain only
            bilm.fast = base != "plain"
        if "graphs" in extras:
            model.use_cuda_graphs(True)
            graphs = True
            if trainer is not None:  # the trainer's autocast must not cache weight casts under graphs
                trainer.settings.cuda_graphs = True
        yield model
    finally:
        if graphs:
            model.use_cuda_graphs(False)
            if trainer is not None:
                trainer.settings.cuda_graphs = False
        for key, value in saved.items():
            if key != "fast":
                setattr(bilm, key, value)
        if "lstm_path" not in saved:
            bilm.fast = saved["fast"]


def section_exactness(rec: Recorder, args) -> None:
    """Every path against the CPU specification, as a user runs it: TF32 as PyTorch leaves it
    (float32 matmuls without, cuDNN's convolutions with TF32 on a GPU: elmo sets neither), so
    the default float32 path is the one checked. On a GPU each float32 inference row runs once
    more with TF32 off (``"tf32": "off"``): the difference between the two is TF32's share. Each
    row runs under the section's alarm (a cold compile slower than estimated is cut, recorded)."""
    import torch

    device, deadline = Device(args.device), Deadline(args.ends_at)
    rec.set("tf32_defaults", {"matmul": bool(torch.backends.cuda.matmul.allow_tf32),
                              "cudnn": bool(torch.backends.cudnn.allow_tf32),
                              "float32_matmul_precision": torch.get_float32_matmul_precision()})
    fixtures = ("allennlp",) if args.quick else ("allennlp", "bilm-tf")
    slowest = 2.0  # seconds of the dearest row so far: the estimate of the next
    plans = [("inference", fixture, variant, "default") for fixture in fixtures for variant in inference_variants()]
    plans += [("training", fixture, path, "default") for fixture in fixtures for path in training_paths()]
    if device.cuda:  # TF32's share of the default's difference, measured after every default row
        plans += [("inference", fixture, variant, "off") for fixture in fixtures for variant in inference_variants()
                  if variant[1] == "float32"]
    for kind, fixture, what, tf32 in plans:
        key = {"fixture": fixture, "path": what if kind == "training" else what[0], "tf32": tf32}
        if kind == "inference":
            key["precision"] = what[1]
        why = device.why_not(path_needs(what) if kind == "training" else what[2])
        if why is None and not deadline.fits(slowest):
            why = deadline.why_not(slowest)
        if why is not None:
            rec.not_measured({"kind": kind, **key}, why)
            continue
        start = time.monotonic()
        try:
            with deadline.stop_at(), (device.tf32(False) if tf32 == "off" else contextlib.nullcontext()):
                row = (inference_exactness(fixture, device, *what[:2]) if kind == "inference"
                       else training_exactness(fixture, device, what))
        except OutOfTime as stopped:
            rec.not_measured({"kind": kind, **key}, f"no time: {stopped}")
            return  # the deadline has passed: nothing else fits
        row["tf32"] = tf32
        slowest = max(slowest, time.monotonic() - start)
        rec.add(kind, row)
        if tf32 == "default" and ("error" in row or row.get("values_within_1e-5") is False
                                  or row.get("gradients_within_1e-4") is False or row.get("within_1e-5") is False):
            rec.fail(f"exactness: {kind} {key} is off the specification: {row}")


def _max_diff(a, b) -> float:
    return float((a.detach().float().cpu() - b.detach().float().cpu()).abs().max())


_TRAINING_REFERENCE: dict = {}  # fixture -> (inputs, the CPU plain path's results): computed once


def training_exactness(fixture: str, device: Device, path: str) -> dict:
    """One training path's outputs, final states and every parameter gradient of one full window
    (both directions, dropout off, random carried state) on ``device``, against the CPU plain path."""
    import copy

    import torch

    if fixture not in _TRAINING_REFERENCE:
        torch.manual_seed(0)
        reference = fixture_model(fixture)
        config = reference.config
        batch, steps = 5, 20
        tokens = torch.randn(batch, steps, config.lstm.projection_dim)
        state = reference.zero_state(batch)
        state = type(state)(torch.randn_like(state.c), torch.randn_like(state.h))
        weights = torch.randn(config.lstm.n_layers, batch, steps, config.lstm.projection_dim)
        inputs = (reference, tokens, state, weights)
        with training_path(reference, "plain"):
            expected = run_window(copy.deepcopy(reference), "cpu", tokens, state, weights)
        _TRAINING_REFERENCE[fixture] = inputs, expected
    (reference, tokens, state, weights), expected = _TRAINING_REFERENCE[fixture]
    if path == "fused+graphs":  # a LanguageModel's graph of the whole window: compared on its top layer
        return graphs_exactness(reference, fixture, tokens, state, weights[-1], device)
    model = copy.deepcopy(reference)
    try:
        with training_path(model, path):
            got = run_window(model, device.name, tokens, state, weights)
    except Exception as error:
        return {"fixture": fixture, "path": path, "device": device.name, "error": f"{type(error).__name__}: {error}"}
    values = max(_max_diff(a, b) for g, e in zip(got, expected) for a, b in zip(g[0] + g[1], e[0] + e[1]))
    grads = max(_max_diff(a, b) / max(1.0, float(b.abs().max())) for g, e in zip(got, expected)
                for a, b in zip(g[2], e[2]))
    return {"fixture": fixture, "path": path, "device": device.name, "dtype": "float32",
            "max_abs_diff_values": values, "max_rel_diff_gradients": grads,
            "values_within_1e-5": values <= 1e-5, "gradients_within_1e-4": grads <= 1e-4}


def run_window(model, on: str, tokens, state, weights) -> list:
    """Both directions' stacks over one window on ``on``: per direction (outputs, final states,
    gradients of a weighted sum of every layer and the final states)."""
    import torch

    from elmo.kernels.dispatch import run_stack

    model = model.to(on).train()
    mask = torch.ones(tokens.shape[:2], dtype=torch.bool)
    results = []
    for direction in (0, 1):
        with torch.enable_grad():
            inputs = tokens.to(on).requires_grad_(True)
            carried = type(state)(state.c.to(on), state.h.to(on))
            outputs, finals = run_stack(model, direction, inputs, mask.to(on), carried)
            total = sum((o * w.to(on)).sum() for o, w in zip(outputs, weights)) + sum(h.sum() for _, h in finals)
            layers = model.forward_layers if direction == 0 else model.backward_layers
            grads = torch.autograd.grad(total, [inputs, *layers.parameters()])
        results.append(([o.detach() for o in outputs], [t.detach() for f in finals for t in f], list(grads)))
    return results


def graphs_exactness(reference, fixture: str, tokens, state, top_weight, device: Device) -> dict:
    """The training window as :meth:`LanguageModel.use_cuda_graphs` captures it (``LstmWindow``
    through ``torch.cuda.make_graphed_callables``, replayed; on a CPU the window itself, eager)
    against the CPU plain path: the top layer of both directions, the final states, and the
    gradients of ``(top * top_weight).sum()`` with respect to the inputs and every LSTM parameter
    (the window's outputs are the top layer and the detached states, so its gradients are of the
    top layer alone)."""
    import copy

    import torch

    from elmo.lm.model import LstmWindow

    row = {"fixture": fixture, "path": "fused+graphs", "device": device.name, "dtype": "float32",
           "graph": "captured and replayed" if device.cuda else "not captured (no CUDA): the window ran eager"}
    mask = torch.ones(tokens.shape[:2], dtype=torch.bool)
    spec = copy.deepcopy(reference).train()
    expected_top, expected_finals, expected_grads = [], [], []
    with training_path(spec, "plain"), torch.enable_grad():
        for direction in (0, 1):
            inputs = tokens.clone().requires_grad_(True)
            outputs, finals = spec.run_stack(direction, inputs, mask, state)
            layers = spec.forward_layers if direction == 0 else spec.backward_layers
            expected_grads.append(torch.autograd.grad((outputs[-1] * top_weight).sum(), [inputs, *layers.parameters()]))
            expected_top.append(outputs[-1].detach())
            expected_finals.append([t.detach() for f in finals for t in f])
    try:
        model = copy.deepcopy(reference).to(device.name).train()
        with training_path(model, "fused"), torch.enable_grad():
            window = LstmWindow(model)
            x = torch.stack([tokens, tokens]).to(device.name).requires_grad_(True)
            c0, h0 = state.c.to(device.name), state.h.to(device.name)
            graphed = device.graphed(window, (x.detach().clone().requires_grad_(True), c0, h0))
            for _ in range(2):  # replays, not the capture's own run
                top, c, h = graphed(x, c0, h0)
            weight = torch.stack([top_weight, top_weight]).to(device.name)
            grads = torch.autograd.grad((top * weight).sum(), [x, *window.parameters()])
    except Exception as error:
        row["error"] = f"{type(error).__name__}: {error}"
        return row
    n_forward = len(list(model.forward_layers.parameters()))
    got_grads = [(grads[0][0], *grads[1:1 + n_forward]), (grads[0][1], *grads[1 + n_forward:])]
    values = max(_max_diff(top[d], expected_top[d]) for d in (0, 1))
    n_layers = c.shape[1]
    for d in (0, 1):
        got = [t for layer in range(n_layers) for t in (c[d, layer], h[d, layer])]
        values = max(values, *(_max_diff(a, b) for a, b in zip(got, expected_finals[d])))
    gradients = max(_max_diff(a, b) / max(1.0, float(b.abs().max()))
                    for d in (0, 1) for a, b in zip(got_grads[d], expected_grads[d]))
    row.update({"max_abs_diff_values": values, "max_rel_diff_gradients": gradients,
                "values_within_1e-5": values <= 1e-5, "gradients_within_1e-4": gradients <= 1e-4})
    return row


def inference_variants() -> list[tuple[str, str, str | None]]:
    """(path, precision, what it needs) of inference, default first."""
    return [("eager", "float32", None), ("eager", "bfloat16", None), ("graphs", "float32", "cuda"),
            ("graphs", "bfloat16", "cuda")]


def inference_exactness(fixture: str, device: Device, path: str, precision: str) -> dict:
    """One inference path on ``device`` against the CPU plain path, on the fixture's sentences
    (three calls, so that CUDA graphs are captured and replayed)."""
    import torch

    from elmo import batch_to_char_ids
    from elmo.inference.runtime import Runtime

    sentences = fixture_sentences(fixture)
    ids, mask = batch_to_char_ids(sentences)
    plain = fixture_model(fixture)
    plain.fast = False
    with torch.no_grad():
        expected = plain(ids, mask).layers
    row = {"fixture": fixture, "path": path, "precision": precision, "device": device.name}
    try:
        runtime = Runtime(fixture_model(fixture), device=device.name, precision=precision, state="reset",
                          cuda_graphs=path == "graphs")
        for _ in range(3):
            got = runtime(ids, mask).layers
    except Exception as error:
        row["error"] = f"{type(error).__name__}: {error}"
        return row
    diff = _max_diff(got, expected)
    row.update({"ran_in": runtime.precision, "max_abs_diff": diff,
                "within_1e-5": diff <= 1e-5 if runtime.precision == "float32" else None})
    if runtime.graphs is not None:
        row.update(graph_captures=runtime.graphs.captures, graph_replays=runtime.graphs.replays,
                   graphs_disabled=runtime.graphs.disabled)
    return row


# This module's sections by name: the driver's child runs them from here, run_alone by --section.
RUNS = {"exactness": section_exactness}

if __name__ == "__main__":
    sys.exit(run_alone(RUNS))
