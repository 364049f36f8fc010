"""This machine's limit for decoding a model: what a decode step cannot beat, measured in one run.

For batch sizes B (``--batch``), the bounds of one decode step of the model (``--model``, SmolLM2 by
default, bf16 weights as served):

- **memory**: every weight is read once per step: weight bytes / the measured copy bandwidth
  (``torch`` copy of a 512 MiB bf16 tensor: bytes read + written over the time, best of ``--repeat``);
- **compute**: 2 FLOP per weight and token: B x 2 x params / the measured bf16 matmul rate (the
  best GFLOP/s of ``torch.mm`` at 2048 x 2048 x 2048);
- **matmuls as served**: the model's own linear layers at batch B in its order (q, k, v, o, gate,
  up, down per layer, then the tied ``lm_head``) as the server runs them in bf16: through
  runtime_ext's compiled loops for 1-64 rows (``runtime_ext.ops.linear_cpu``: AMX tiles from 5
  rows where the CPU has them, up to 8 rows otherwise), else
  ``torch.nn.functional.linear``; and torch's alone beside it. The time of one step's matmuls
  alone, no attention, norms, sampling or serving.

The roofline bound is max(memory, compute) per step; tok/s = B / step time. Measured decode tok/s
is compared against these in docs/benchmarks.md (the serving bench measures it).

    .venv/bin/python bench/roofline.py        # ~1 min here
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LINEARS = tuple(f"self_attn.{n}_proj" for n in "qkvo") + tuple(f"mlp.{n}_proj" for n in ("gate", "up", "down"))


def best(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bandwidth(repeat: int) -> float:
    """Bytes per second of a 512 MiB bf16 copy (read + write)."""
    src = torch.ones(256 << 20, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 2 / best(lambda: dst.copy_(src), repeat)


def matmul_rate(repeat: int, n: int = 2048) -> float:
    a, b = torch.randn(n, n, dtype=torch.bfloat16), torch.randn(n, n, dtype=torch.bfloat16)
    return 2 * n**3 / best(lambda: torch.mm(a, b), repeat)


def model_weights(model_dir: Path) -> list[torch.Tensor]:
    """The linear weights one decode step multiplies by, in order (the tied embedding as lm_head)."""
    from safetensors.torch import load_file

    tensors = load_file(str(model_dir / "model.safetensors"))
    layers = sorted({int(k.split(".")[2]) for k in tensors if k.startswith("model.layers.")})
    names = (
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
    )
    order = [f"model.layers.{i}.{n}.weight" for i in layers for n in (*names, "mlp.down_proj")]
    head = tensors.get("lm_head.weight", tensors["model.embed_tokens.weight"])
    return [tensors[name].to(torch.bfloat16) for name in order] + [head.to(torch.bfloat16)]


def served_matmuls(weights: list[torch.Tensor], batch: int, repeat: int, linear=None) -> float:
    """Seconds for one step's matmuls at ``batch`` (each layer fed a fresh input of its width) through
    ``linear`` (default: what the server runs, ``linear_cpu.linear``)."""
    from runtime_ext.ops import linear_cpu

    linear = linear or linear_cpu.linear
    inputs = {w.shape[1]: torch.randn(batch, w.shape[1], dtype=torch.bfloat16) for w in weights}

    def step() -> None:
        for w in weights:
            linear(inputs[w.shape[1]], w)

    return best(step, repeat)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="model dir (default: SmolLM2 from the cache)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    from assets import fetch

    model = args.model or fetch(["smollm2"]).smollm2
    weights = model_weights(model)
    params, weight_bytes = sum(w.numel() for w in weights), sum(w.numel() * 2 for w in weights)
    bw, rate = bandwidth(args.repeat), matmul_rate(args.repeat)
    title = f"{model.name}: {params / 1e6:.1f} M matmul weights ({weight_bytes / 2**20:.0f} MiB bf16); "
    title += f"copy {bw / 1e9:.1f} GB/s, bf16 mm {rate / 1e9:.1f} GFLOP/s; {torch.get_num_threads()} threads"
    table = Table(title=title)
    cols = ("batch", "memory bound tok/s", "compute bound tok/s", "roofline tok/s", "matmuls as served tok/s")
    for col in (*cols, "torch F.linear matmuls tok/s"):
        table.add_column(col)
    rows = []
    for b in args.batch:
        memory, compute = weight_bytes / bw, b * 2 * params / rate
        served = served_matmuls(weights, b, args.repeat)
        row = {"batch": b, "memory": b / memory, "compute": b / compute, "roofline": b / max(memory, compute)}
        row["matmuls"] = b / served
        row["torch_matmuls"] = b / served_matmuls(weights, b, args.repeat, torch.nn.functional.linear)
        rows.append(row)
        table.add_row(str(b), *(f"{row[k]:.1f}" for k in ("memory", "compute", "roofline", "matmuls", "torch_matmuls")))
    Console(width=160).print(table)
    if args.out:
        args.out.write_text(
            json.dumps({"bandwidth": bw, "matmul_rate": rate, "params": params, "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
