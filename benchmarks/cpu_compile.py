"""``torch.compile`` on the CPU against the runtime's eager LSTM step (issue 49, item 1: "try
PyTorch's own routes ... before writing anything by hand").

For the small and original published sizes, in float32 and bfloat16, one LSTM step of both
directions on ``--rows`` running rows, timed per call (best of ``--rounds``, the two versions
alternating in each round):

* ``eager``: the runtime's own step, from its own functions: the recurrent products on
  oneDNN's kernel in row blocks (``_recurrent_gates_in_blocks``, weights from
  ``stack_directions``, pre-packed in bfloat16), the input half added, the cell's pointwise work
  (``lstm_cell_inplace``), the projections and their clip;
* ``compiled, blocks``: the same step written plainly (``torch.nn.functional.linear`` on the
  runtime's row blocks, the cell as formulas), compiled by Inductor with ``freezing`` (which lets
  it pack the weights into oneDNN's layout itself), static shapes;
* ``compiled, one product``: the same, with each product over all rows at once (which the
  runtime does not do: a row's numbers would then depend on its batch), for scale;

and the cell's pointwise work alone, eager against compiled with static and dynamic shapes.
Also: the seconds to import Dynamo and Inductor in a fresh process, each compilation's seconds
(Inductor's on-disk cache pointed at an empty folder, so they are cold), and the largest
difference of the compiled results from the eager ones. Prints a table and writes JSON:

    python benchmarks/cpu_compile.py --output results/benchmarks/cpu_compile.json
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Inductor reads its cache folder when it is imported: an empty one, so compilations are cold.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="elmo-inductor-"))

import torch  # noqa: E402
from common import write_results  # noqa: E402

from elmo.model.blocks import linear, row_block  # noqa: E402
from elmo.model.config import published_config  # noqa: E402
from elmo.model.lstm import LstmLayer, _recurrent_gates_in_blocks, lstm_cell_inplace, stack_directions  # noqa: E402


def import_seconds() -> float:
    """Seconds to import Dynamo and Inductor after torch, in a fresh process."""
    code = ("import time, torch; t = time.perf_counter(); import torch._dynamo, torch._inductor.compile_fx; "
            "print(time.perf_counter() - t)")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


class PlainStep(torch.nn.Module):
    """One step of both directions as formulas, for Inductor: ``(x_gates, h, c) -> (h_new, c_new)``
    with ``x_gates`` ``(2, rows, 4*dim)`` float32 (input half and bias), ``h`` ``(2, rows, proj)``
    in the products' dtype, ``c`` ``(2, rows, dim)`` float32. ``state`` ``(2, 4*dim, proj)`` and
    ``projection`` ``(2, proj, dim)``: the runtime's weights, ``j``'s rows doubled as it folds
    them, or, with ``gate_scale`` ``(4*dim,)``, the layers' own, the summed gates scaled instead
    (the runtime's float32 route: ``StackedWeights.double_j_after``)."""

    def __init__(self, state: torch.Tensor, projection: torch.Tensor, clip: float, block: int | None,
                 gate_scale: torch.Tensor | None):
        super().__init__()
        self.state = torch.nn.Parameter(state, requires_grad=False)
        self.projection = torch.nn.Parameter(projection, requires_grad=False)
        self.clip, self.block, self.gate_scale = clip, block, gate_scale

    def product(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``x @ weight.T``: on row blocks of ``block`` rows as the runtime's (None: one product)."""
        if self.block is None:
            return torch.nn.functional.linear(x, weight)
        return torch.cat([torch.nn.functional.linear(x[start:start + self.block], weight)
                          for start in range(0, x.shape[0], self.block)])

    def forward(self, x_gates, h, c):
        outputs, cells = [], []
        for d in range(2):
            gates = self.product(h[d], self.state[d]).float() + x_gates[d]
            if self.gate_scale is not None:
                gates = gates * self.gate_scale
            i, j, f, o = torch.sigmoid(gates).chunk(4, -1)
            cell = (c[d] * f + i * (2 * j - 1)).clamp(-self.clip, self.clip)
            q = (o * torch.tanh(cell)).to(h.dtype)
            outputs.append(self.product(q, self.projection[d]).clamp(-self.clip, self.clip))
            cells.append(cell)
        return torch.stack(outputs), torch.stack(cells)


def best_of(rounds: int, calls: int, versions: dict) -> dict:
    """Microseconds per call of each version (``name -> zero-argument callable``), best of
    ``rounds``, the versions alternating within each round."""
    best = {name: float("inf") for name in versions}
    for _ in range(rounds):
        for name, run in versions.items():
            start = time.perf_counter()
            for _ in range(calls):
                run()
            best[name] = min(best[name], (time.perf_counter() - start) / calls * 1e6)
    return best


def measure(size: str, dtype: torch.dtype, rows: int, rounds: int, calls: int) -> dict:
    """One size and precision: the step and the cell, eager against compiled."""
    config = published_config(size).lstm
    dim, proj, clip = config.dim, config.projection_dim, float(config.cell_clip)
    torch.manual_seed(0)
    layers = [LstmLayer(proj, dim, proj, cell_clip=clip, proj_clip=clip).eval() for _ in range(2)]
    weights = stack_directions(*layers, dtype)
    block = row_block()
    x_gates = torch.randn(2, rows, 4 * dim)
    h = torch.randn(2, rows, proj).clamp(-clip, clip).to(dtype)
    c0 = torch.randn(2, rows, dim)
    gates = torch.empty(2, -(-rows // block) * block, 4 * dim)
    q = torch.empty(2, gates.shape[1], dim, dtype=dtype)
    h_new = torch.empty(2, gates.shape[1], proj, dtype=dtype)

    def eager_step():
        c = c0.clone()
        step = _recurrent_gates_in_blocks(x_gates, h, weights, rows, gates, block)
        lstm_cell_inplace(step, c[:, :rows], clip, weights.doubled_j, dtype=dtype, q_out=q[:, :rows])
        for d, direction in enumerate(weights.linear):
            for start in range(0, gates.shape[1], block):
                h_new[d, start:start + block] = linear(q[d, start:start + block], direction.projection)
        return h_new[:, :rows].clamp_(-clip, clip), c

    # The runtime's weights, in the (out, in) layout, with j doubled where it doubles it (in the
    # weights, or on the summed gates): the same step, so the results can be compared.
    state = torch.stack([l.state_weight.detach() for l in layers]).clone()
    gate_scale = None
    if weights.double_j_after:
        gate_scale = torch.ones(4 * dim)
        gate_scale[dim:2 * dim] = 2.0
    else:
        state[:, dim:2 * dim] *= 2
    projection = torch.stack([l.projection.detach() for l in layers]).to(dtype)
    # The runtime's row blocks (what keeps a row's numbers independent of its batch), and one
    # product over all rows (not batch-independent: for scale).
    plain = {"blocks": PlainStep(state.to(dtype), projection, clip, block, gate_scale).eval(),
             "one product": PlainStep(state.to(dtype), projection, clip, None, gate_scale).eval()}

    result = {"size": size, "dtype": str(dtype).replace("torch.", ""), "rows": rows}
    # Both compute x + b + h W: in float32 the runtime's recurrent product adds the bias, in
    # bfloat16 its input half carries it (and so does the plain step's, in both).
    bias = weights.bias.squeeze(1).unsqueeze(1)  # (2, 1, 4*dim)
    x_plain = x_gates + bias
    if dtype != torch.float32:
        x_gates = x_plain
    with torch.inference_mode():
        import torch._inductor.config as inductor_config
        inductor_config.freezing = True
        reference_h, reference_c = eager_step()
        steps = {"eager": eager_step}
        for name, module in plain.items():
            compiled = torch.compile(module)
            start = time.perf_counter()
            compiled(x_plain, h, c0.clone())
            result[f"step_compile_seconds_{name}"] = time.perf_counter() - start
            compiled_h, compiled_c = compiled(x_plain, h, c0.clone())
            result[f"step_max_difference_h_{name}"] = float((compiled_h.float() - reference_h.float()).abs().max())
            result[f"step_max_difference_c_{name}"] = float((compiled_c - reference_c).abs().max())
            steps[f"compiled, {name}"] = lambda compiled=compiled: compiled(x_plain, h, c0.clone())
        result["step_us"] = best_of(rounds, calls, steps)

        def cell(g, c, out):
            return lstm_cell_inplace(g, c, clip, weights.doubled_j, dtype=dtype, q_out=out)

        cell_versions = {"eager": cell}
        for shapes in ("static", "dynamic"):
            cell_versions[shapes] = torch.compile(cell, dynamic=shapes == "dynamic")
            start = time.perf_counter()
            cell_versions[shapes](torch.randn(2, rows, 4 * dim), c0.clone(), q[:, :rows])
            result[f"cell_compile_seconds_{shapes}"] = time.perf_counter() - start
        sample = torch.randn(2, rows, 4 * dim)
        outs = {}
        for name, run in cell_versions.items():
            out = torch.empty(2, rows, dim, dtype=dtype)
            run(sample.clone(), c0.clone(), out)
            outs[name] = out.float()
        result["cell_max_difference"] = {name: float((outs[name] - outs["eager"]).abs().max())
                                         for name in ("static", "dynamic")}
        samples = [torch.randn(2, rows, 4 * dim) for _ in range(calls)]
        result["cell_us"] = best_of(rounds, 1, {
            name: (lambda run=run: [run(g.clone(), c0.clone(), q[:, :rows]) for g in samples])
            for name, run in cell_versions.items()})
        result["cell_us"] = {name: value / calls for name, value in result["cell_us"].items()}
    torch._dynamo.reset()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["small", "original"])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--rows", type=int, default=64, help="running rows of the step (the default batch)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--output", default="results/benchmarks/cpu_compile.json")
    args = parser.parse_args(argv)
    imports = import_seconds()
    results = [measure(size, getattr(torch, dtype), args.rows, args.rounds, args.calls)
               for size in args.sizes for dtype in args.dtypes]
    print(f"import torch._dynamo + torch._inductor: {imports:.2f} s (fresh process)")
    print(f"one LSTM step, both directions, {args.rows} rows: microseconds per call (best of {args.rounds})")
    print("step: eager (the runtime's), compiled on the runtime's row blocks, compiled as one product over all"
          " rows (eager/compiled ratios; compile seconds; largest |h| difference from eager)")
    print(f"{'size':9}{'dtype':>10}{'eager':>8}{'blocks':>8}{'ratio':>7}{'one':>7}{'ratio':>7}{'compile s':>11}"
          f"{'max |dh|':>10}{'cell eager':>12}{'static':>8}{'dynamic':>9}{'compile s':>11}")
    for r in results:
        step, cell = r["step_us"], r["cell_us"]
        blocks, one = step["compiled, blocks"], step["compiled, one product"]
        print(f"{r['size']:9}{r['dtype']:>10}{step['eager']:>8.0f}{blocks:>8.0f}{step['eager'] / blocks:>6.2f}x"
              f"{one:>7.0f}{step['eager'] / one:>6.2f}x"
              f"{r['step_compile_seconds_blocks']:>6.1f}/{r['step_compile_seconds_one product']:.1f}"
              f"{r['step_max_difference_h_blocks']:>10.2g}{cell['eager']:>12.0f}{cell['static']:>8.0f}"
              f"{cell['dynamic']:>9.0f}{r['cell_compile_seconds_static']:>6.1f}/{r['cell_compile_seconds_dynamic']:.1f}")
    write_results(args.output, {"rows": args.rows, "rounds": args.rounds, "calls": args.calls,
                                "import_seconds": imports, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
