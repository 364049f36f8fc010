"""``structserve quant calibrate | scan | export``: SmoothQuant with an α search, the sensitive-layer
scan, and quantized checkpoints in the msModelSlim layout."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Mapping, NoReturn, Optional

import typer

from tools.outputs import OutputRefused, check_output, staged_dir, staged_files

quant_app = typer.Typer(
    help="Quantized linear layers: SmoothQuant calibration, sensitivity scan, export.", no_args_is_help=True
)
ModelOpt = Annotated[Optional[Path], typer.Option("--model", help="model dir (default: SmolLM2 from the cache)")]
TextOpt = Annotated[
    Optional[Path], typer.Option("--text", help="UTF-8 text file (default: the Austen calibration split)")
]
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="replace an existing --out as a whole")]


def _model_dir(model: Optional[Path]) -> Path:
    from assets import default_model_dir

    return model or default_model_dir()


def _text(text: Optional[Path]) -> str:
    from assets import calibration_text, fetch

    return text.read_text(encoding="utf-8") if text else (fetch(["austen"]) and calibration_text())


def _refused(command: str, exc: Exception) -> NoReturn:
    typer.echo(f"structserve quant {command}: {exc}", err=True)
    raise typer.Exit(2) from None


def _check_out(command: str, outs: list[Path], model_dir: Path, overwrite: bool, **inputs: Optional[Path]) -> None:
    """Exit 2 with what to change when writing ``outs`` could destroy an input or an earlier result."""
    named: Mapping[str, Optional[Path]] = {f"--{k.replace('_', '-')}": v for k, v in inputs.items()}
    kind = "directory" if command != "scan" else "file"
    try:
        for out in outs:
            check_output(out, model_dir, overwrite=overwrite, inputs=named, kind=kind)
    except OutputRefused as exc:
        _refused(command, exc)


@quant_app.command("calibrate")
def calibrate_cmd(
    out: Annotated[Path, typer.Option("--out", help="directory for the calibrated checkpoint")],
    model: ModelOpt = None,
    text: TextOpt = None,
    method: Annotated[str, typer.Option(help="smoothquant (W8A8) | awq | gptq (weight-only)")] = "smoothquant",
    tokens: Annotated[Optional[int], typer.Option(help="calibration tokens (default 1024; AWQ/GPTQ 4096)")] = None,
    scheme: Annotated[str, typer.Option(help="AWQ/GPTQ: w4a16 | w8a16")] = "w4a16",
    group_size: Annotated[int, typer.Option(help="AWQ/GPTQ group size")] = 128,
    act_order: Annotated[bool, typer.Option(help="GPTQ: columns by decreasing Hessian diagonal")] = False,
    clip: Annotated[bool, typer.Option(help="AWQ/GPTQ: search a clipping range (scale) per group")] = True,
    asym: Annotated[bool, typer.Option(help="GPTQ: a zero point per group (all 2^b levels)")] = False,
    sensitive_layers: Annotated[Optional[Path], typer.Option(help="GPTQ: keep these layers in bf16")] = None,
    overwrite: OverwriteOpt = False,
) -> None:
    """SmoothQuant (α search on W8A8 calibration perplexity; writes the smoothed checkpoint), AWQ
    (writes the scaled checkpoint that w4a16 then quantizes) or GPTQ (writes the quantized
    checkpoint in the msModelSlim layout, served as it is). The checkpoint appears at --out only when
    it is complete."""
    model_dir = _model_dir(model)
    _check_out("calibrate", [out], model_dir, overwrite, text=text, sensitive_layers=sensitive_layers)
    if method not in ("smoothquant", "awq", "gptq"):
        raise typer.BadParameter(f"unknown method {method!r}; valid: smoothquant, awq, gptq", param_hint="--method")
    if asym and method == "awq":
        raise typer.BadParameter("AWQ writes a float checkpoint, quantized symmetric at load", param_hint="--asym")
    source = _text(text)
    if method == "smoothquant":
        with staged_dir(out) as partial:
            _smoothquant(model_dir, source, partial, out, tokens or 1024)
        return
    from runtime_ext.quant.policy import QuantPolicy
    from runtime_ext.quant.sensitivity import load_sensitive_layers

    keep = tuple(load_sensitive_layers(sensitive_layers)) if sensitive_layers else ()
    policy = QuantPolicy(scheme, group_size, keep=keep)  # type: ignore[arg-type]  # keep: closed over fused modules
    run = _awq if method == "awq" else _gptq
    with staged_dir(out) as partial:
        run(model_dir, source, partial, out, policy, tokens or 4096, act_order=act_order, clip=clip, asym=asym)


def _smoothquant(model_dir: Path, source: str, partial: Path, out: Path, tokens: int) -> None:
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from tools.quant.smooth import calibrate

    result = calibrate(model_dir, source, partial, tokens=tokens, progress=lambda it: tqdm(it, desc="α search"))
    table = Table(title=f"SmoothQuant on {model_dir.name}: W8A8 calibration perplexity ({tokens} tokens) -> {out}")
    table.add_column("α", justify="right")
    table.add_column("perplexity", justify="right")
    for alpha, ppl in result["calibration_ppl"].items():
        mark = "  ← chosen" if alpha == result["alpha"] else ""
        table.add_row(str(alpha), f"{ppl:.3f}{mark}")
    Console().print(table)


def _awq(
    model_dir: Path, source: str, partial: Path, out: Path, policy, tokens: int, *, clip: bool, **_: object
) -> None:
    import time

    from tqdm import tqdm

    from tools.quant.awq import calibrate

    start = time.perf_counter()
    chosen = calibrate(
        model_dir,
        source,
        partial,
        policy,
        tokens=tokens,
        clip=clip,
        progress=lambda it: tqdm(it, desc="AWQ", unit="layer"),
    )
    alphas = [a for layer in chosen.values() for a in layer.values()]
    typer.echo(
        f"AWQ ({policy.scheme} g{policy.group_size}, {tokens} tokens, clip {clip}): "
        f"mean α {sum(alphas) / len(alphas):.2f}, {time.perf_counter() - start:.0f} s "
        f"-> {out} (serve with w4a16 or `quant export`)"
    )


def _gptq(
    model_dir: Path,
    source: str,
    partial: Path,
    out: Path,
    policy,
    tokens: int,
    *,
    act_order: bool,
    clip: bool,
    asym: bool,
) -> None:
    import time

    from tqdm import tqdm

    from tools.quant.export import export
    from tools.quant.gptq import Options, calibrate

    start = time.perf_counter()
    progress = lambda it: tqdm(it, desc="GPTQ", unit="layer")  # noqa: E731
    options = Options(act_order=act_order, mse=clip, asym=asym)
    quantized = calibrate(model_dir, source, policy, tokens=tokens, options=options, progress=progress)
    result = export(model_dir, partial, policy, precomputed=quantized)
    typer.echo(
        f"GPTQ ({policy.scheme} g{policy.group_size}, {tokens} tokens, act-order {act_order}, clip {clip}, "
        f"asym {asym}): "
        f"{result['quantized']} layers quantized, {result['kept']} kept, {time.perf_counter() - start:.0f} s -> {out}"
    )


@quant_app.command("scan")
def scan_cmd(
    out: Annotated[Path, typer.Option("--out", help="sensitive_layers.json to write (.md and .png beside it)")],
    model: ModelOpt = None,
    text: TextOpt = None,
    scheme: Annotated[str, typer.Option(help="w8a8_dynamic | w8a16 | w4a16")] = "w8a8_dynamic",
    tokens: Annotated[int, typer.Option(help="calibration tokens for the KL")] = 512,
    kl_top: Annotated[float, typer.Option(help="also keep this share of layers with the highest KL")] = 0.05,
    events: Annotated[
        Optional[Path],
        typer.Option(help="the online monitor's events file (quant.monitor.events_path): its fallbacks are kept too"),
    ] = None,
    overwrite: OverwriteOpt = False,
) -> None:
    """Per linear layer: dispersion R, KL with only that layer quantized, energy σ₁/Σσ; writes the fallback
    list (every shard of a fused module one of whose shards is flagged, with the reason). With --events, the
    layers the online monitor switched to high precision are kept as well (the closed loop). The three files
    replace what --out names at once, when all are written (a server re-reading --out never sees half a file)."""
    from tqdm import tqdm

    from runtime_ext.quant import sensitivity
    from runtime_ext.quant.policy import QuantPolicy
    from tools.quant.offline import scan

    model_dir = _model_dir(model)
    outs = [out, out.with_suffix(".md"), out.with_suffix(".png")]
    _check_out("scan", outs, model_dir, overwrite, text=text, events=events)
    source, recorded = _text(text), _monitor_events(events)
    scores = scan(model_dir, source, QuantPolicy(scheme), tokens=tokens, progress=lambda it: tqdm(it, desc="layers"))
    thresholds = {**sensitivity.THRESHOLDS, "kl_top": kl_top}
    reasons = sensitivity.fallback(scores, thresholds, recorded)
    with staged_files(*outs) as (json_file, md_file, png_file):
        sensitivity.write(json_file, model_dir.name, scheme, scores, reasons, thresholds)
        md_file.write_text(sensitivity.markdown(scores, reasons))
        _plot(scores, list(reasons), png_file, f"{model_dir.name} {scheme}: KL per linear layer")
    flagged = len(sensitivity.select(scores, **thresholds))
    typer.echo(
        f"{len(reasons)} of {len(scores)} layers kept in high precision ({flagged} flagged, "
        f"the rest share a fused module with a flagged one) -> {out}"
    )


def _monitor_events(path: Optional[Path]) -> list[dict]:
    """The recorded monitor events of ``path`` (none without one); exits 2 when it is unreadable."""
    from runtime_ext.quant.monitor import read_events

    if path is None:
        return []
    try:
        events, bad = read_events(path.read_text().splitlines())
    except OSError as exc:
        typer.echo(f"cannot read the events file {path}: {exc}", err=True)
        raise typer.Exit(2) from None
    fallbacks = sum(1 for e in events if e["kind"] == "fallback")
    skipped = f" ({bad} lines skipped: not events)" if bad else ""
    typer.echo(f"{path}: {fallbacks} fallback events folded in{skipped}")
    return events


@quant_app.command("export")
def export_cmd(
    out: Annotated[Path, typer.Option("--out", help="directory for the quantized checkpoint")],
    scheme: Annotated[str, typer.Option(help="w8a8_dynamic | w8a16 | w4a16")],
    model: ModelOpt = None,
    group_size: Annotated[int, typer.Option(help="W8A16/W4A16 group size")] = 128,
    sensitive_layers: Annotated[Optional[Path], typer.Option(help="keep these layers (a scan's JSON) in bf16")] = None,
    target: Annotated[
        str, typer.Option(help="whose loader reads it: structserve | sglang-npu | vllm-ascend (docs/ascend.md)")
    ] = "structserve",
    overwrite: OverwriteOpt = False,
) -> None:
    """Write a quantized checkpoint in the msModelSlim layout (quant_model_description.json + int8 weights).
    It appears at --out only when complete."""
    from tqdm import tqdm

    from runtime_ext.quant.policy import QuantPolicy, QuantPolicyError
    from runtime_ext.quant.sensitivity import load_sensitive_layers
    from runtime_ext.quant.targets import TargetError, layout
    from tools.quant.export import export

    try:
        layout(target, scheme)  # refuse before fetching or reading anything
        policy = QuantPolicy(scheme, group_size, keep=())  # type: ignore[arg-type]
    except (TargetError, QuantPolicyError) as exc:
        _refused("export", exc)
    model_dir = _model_dir(model)
    _check_out("export", [out], model_dir, overwrite, sensitive_layers=sensitive_layers)
    keep = tuple(load_sensitive_layers(sensitive_layers)) if sensitive_layers else ()
    with staged_dir(out) as partial:
        result = export(
            model_dir,
            partial,
            QuantPolicy(policy.scheme, group_size, keep=keep),
            progress=lambda it: tqdm(it, desc="quantizing", unit="layer"),
            target=target,
        )
    typer.echo(
        f"{result['quantized']} linear layers {result['type']} for {target}, {result['kept']} kept; "
        f"{result['bytes'] / 2**20:.1f} MiB of tensors -> {out}"
    )


def _plot(scores: dict, layers: list[str], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(scores)
    fig, ax = plt.subplots(figsize=(max(8, len(names) * 0.06), 4))
    ax.bar(
        range(len(names)),
        [scores[n]["kl"] for n in names],
        color=["tab:red" if n in layers else "tab:blue" for n in names],
    )
    ax.set_yscale("log")
    ax.set_xlabel("linear layer (checkpoint order); red = kept in high precision")
    ax.set_ylabel("KL (only this layer quantized)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
