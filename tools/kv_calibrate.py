"""``structserve kv calibrate``: static C8 KV scales and the residual threshold from real text."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

kv_app = typer.Typer(help="C8 INT8 KV cache: calibration.", no_args_is_help=True)


@kv_app.command("calibrate")
def kv_calibrate(
    out: Annotated[Path, typer.Option("--out", help="where to write the calibration JSON")],
    model: Annotated[Optional[Path], typer.Option("--model", help="model dir (default: SmolLM2 from the cache)")] = None,
    text: Annotated[Optional[Path], typer.Option("--text", help="UTF-8 text file (default: the Austen calibration split)")] = None,
    tokens: Annotated[int, typer.Option(help="calibration tokens")] = 2048,
    chunk: Annotated[int, typer.Option(help="tokens per forward pass")] = 256,
) -> None:
    """Record per-channel K/V absmax and the INT8 error distribution; write scales + τ."""
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from runtime_ext.kv_cache.calibration import calibrate
    from assets import calibration_text, fetch

    model_dir = model or fetch(["smollm2"]).smollm2
    source = text.read_text(encoding="utf-8") if text else (fetch(["austen"]) and calibration_text())
    calib = calibrate(model_dir, source, tokens=tokens, chunk=chunk,
                      progress=lambda it: tqdm(it, desc="calibrating", unit="chunk"))
    calib.save(out)
    table = Table(title=f"KV calibration: {calib.model}, {calib.tokens} tokens -> {out}")
    for col in ("layers", "kv heads", "head dim", "ε mean", "ε p99", "τ = 3·mean", "outlier rate"):
        table.add_column(col, justify="right")
    table.add_row(str(calib.layers), str(calib.kv_heads), str(calib.head_dim), f"{calib.eps_mean:.4f}",
                  f"{calib.eps_p99:.4f}", f"{calib.tau:.4f}", f"{calib.outlier_rate:.2%}")
    Console().print(table)
