"""``structserve kv calibrate``: static C8 KV scales and the residual threshold from real text.

``calibrate`` runs real text through the model (HF transformers, float32) in chunks,
reads the post-RoPE K and V each layer caches, and records per layer / K-or-V / head /
channel absmax -> static scales ``absmax / 127`` (of the Hadamard-rotated K, and V, when
``rotation`` says the server stores them rotated: ``runtime_ext.kv_cache.rotation``). It
then measures, on the same tokens, the relative INT8 error ε = ‖x − deq(q(x))‖/‖x‖ of
every (token, head) vector under those scales, and sets the residual threshold τ = 3 × mean ε
(the outlier rate is the share of vectors above τ). The file it writes, and its loading while serving, are
``runtime_ext.kv_cache.calibration``.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Optional

import typer

from runtime_ext.config import DEFAULT_KV_ROTATION, KV_ROTATIONS, KVRotation, resolve_rotation
from runtime_ext.kv_cache.calibration import Calibration
from tools.outputs import OutputRefused, check_output, staged_files

KVRotationChoice = Enum("KVRotationChoice", {name: name for name in KV_ROTATIONS}, type=str)  # type: ignore[misc]

TAU_FACTOR = 3.0

kv_app = typer.Typer(help="C8 INT8 KV cache: calibration.", no_args_is_help=True)


def _chunks(ids: list[int], size: int) -> Iterable[list[int]]:
    for start in range(0, len(ids) - 1, size):
        yield ids[start : start + size]


def calibrate(
    model_dir: Path,
    text: str,
    *,
    tokens: int = 2048,
    chunk: int = 256,
    rotation: KVRotation = DEFAULT_KV_ROTATION,
    progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it,
) -> Calibration:
    """Scales and τ for ``model_dir`` from the first ``tokens`` tokens of ``text``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from runtime_ext.ops import kv_ref

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ids = tok.encode(text[: tokens * 16], add_special_tokens=False)[:tokens]  # ~4 chars per token: plenty
    keys: list[list[Any]] = []
    values: list[list[Any]] = []
    with torch.no_grad():
        for piece in progress(list(_chunks(ids, chunk))):
            cache = model(torch.tensor([piece]), use_cache=True).past_key_values
            for layer, entry in enumerate(cache.layers):
                if layer == len(keys):
                    keys.append([]), values.append([])
                keys[layer].append(entry.keys[0].transpose(0, 1))  # [T, H, D]
                values[layer].append(entry.values[0].transpose(0, 1))
    rotation = resolve_rotation(rotation, "c8_static")  # the scales serve the static modes
    k = [_space(torch.cat(parts), rotation in ("k", "kv")) for parts in keys]
    v = [_space(torch.cat(parts), rotation == "kv") for parts in values]
    k_scale = [(x.abs().amax(dim=0) / kv_ref.INT8_MAX).clamp_min(1e-8) for x in k]
    v_scale = [(x.abs().amax(dim=0) / kv_ref.INT8_MAX).clamp_min(1e-8) for x in v]
    eps = torch.cat(
        [
            kv_ref.relative_error(x, kv_ref.dequantize_static(kv_ref.quantize_static(x, s), s, torch.float32)).flatten()
            for x, s in zip(k + v, k_scale + v_scale)
        ]
    )
    tau = TAU_FACTOR * float(eps.mean())
    _, heads, dim = k[0].shape
    return Calibration(
        model=Path(model_dir).name,
        layers=len(k),
        kv_heads=heads,
        head_dim=dim,
        k_scale=[s.tolist() for s in k_scale],
        v_scale=[s.tolist() for s in v_scale],
        tau=tau,
        eps_mean=float(eps.mean()),
        eps_p99=float(eps.quantile(0.99)),
        outlier_rate=float((eps > tau).float().mean()),
        tokens=len(ids),
        rotation=rotation,
    )


def _space(x: Any, rotated: bool) -> Any:
    """``x[T, H, D]`` in the space the server stores it (Hadamard-rotated or not)."""
    from runtime_ext.ops import kv_ref

    return kv_ref.rotate(x, kv_ref.hadamard(x.shape[-1])) if rotated else x


@kv_app.command("calibrate")
def kv_calibrate(
    out: Annotated[Path, typer.Option("--out", help="where to write the calibration JSON")],
    model: Annotated[
        Optional[Path], typer.Option("--model", help="model dir (default: SmolLM2 from the cache)")
    ] = None,
    text: Annotated[
        Optional[Path], typer.Option("--text", help="UTF-8 text file (default: the Austen calibration split)")
    ] = None,
    tokens: Annotated[int, typer.Option(help="calibration tokens")] = 2048,
    chunk: Annotated[int, typer.Option(help="tokens per forward pass")] = 256,
    rotation: Annotated[
        KVRotationChoice, typer.Option(help="the kv_rotation the server will run with (scales in its space)")
    ] = KVRotationChoice(DEFAULT_KV_ROTATION),
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace an existing --out")] = False,
) -> None:
    """Record per-channel K/V absmax and the INT8 error distribution; write scales + τ (--out appears
    only when complete)."""
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from assets import calibration_text, default_model_dir, fetch

    model_dir = model or default_model_dir()
    try:
        check_output(out, model_dir, overwrite=overwrite, inputs={"--text": text}, kind="file")
    except OutputRefused as exc:
        typer.echo(f"structserve kv calibrate: {exc}", err=True)
        raise typer.Exit(2) from None
    source = text.read_text(encoding="utf-8") if text else (fetch(["austen"]) and calibration_text())
    calib = calibrate(
        model_dir,
        source,
        tokens=tokens,
        chunk=chunk,
        rotation=rotation.value,
        progress=lambda it: tqdm(it, desc="calibrating", unit="chunk"),
    )
    with staged_files(out) as (partial,):
        calib.save(partial)
    table = Table(title=f"KV calibration: {calib.model}, {calib.tokens} tokens, rotation {calib.rotation} -> {out}")
    for col in ("layers", "kv heads", "head dim", "ε mean", "ε p99", "τ = 3·mean", "outlier rate"):
        table.add_column(col, justify="right")
    table.add_row(
        str(calib.layers),
        str(calib.kv_heads),
        str(calib.head_dim),
        f"{calib.eps_mean:.4f}",
        f"{calib.eps_p99:.4f}",
        f"{calib.tau:.4f}",
        f"{calib.outlier_rate:.2%}",
    )
    Console().print(table)
