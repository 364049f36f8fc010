"""The ``structserve`` command line: serve, assets, grammar check, kv calibrate, quant calibrate/scan."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(help="structserve: OpenAI-compatible structured generation on SGLang.", no_args_is_help=True)
assets_app = typer.Typer(help="Fetch, verify and convert models, tokenizers and text.", no_args_is_help=True)
app.add_typer(assets_app, name="assets")


def _mount_grammar() -> None:
    from grammars.check_cli import grammar_app

    app.add_typer(grammar_app, name="grammar", help="Check JSON schemas against the grammar engine.")


_mount_grammar()


def _mount_kv() -> None:
    from runtime_ext.kv_cache.cli import kv_app

    app.add_typer(kv_app, name="kv", help="C8 INT8 KV cache: calibration.")


_mount_kv()


def _mount_quant() -> None:
    from runtime_ext.quant.cli import quant_app

    app.add_typer(quant_app, name="quant", help="Quantized linear layers: SmoothQuant calibration, sensitivity scan.")


_mount_quant()

DEFAULT_MODEL_ASSET = "smollm2"


@app.command()
def serve(
    model: Annotated[Optional[Path], typer.Option(help="Model directory (HF layout). Default: the embedded SmolLM2.")] = None,
    config: Annotated[Optional[Path], typer.Option(help="YAML file overriding configs/default.yaml.")] = None,
    host: Annotated[Optional[str], typer.Option(help="Bind address.")] = None,
    port: Annotated[Optional[int], typer.Option(help="Port.")] = None,
) -> None:
    """Serve the OpenAI-compatible API (fetches the default model on first use)."""
    import uvicorn

    from service.logs import setup_logging
    from service.main import create_app
    from service.serving import DrainingServer
    from service.settings import load_settings

    settings = load_settings(config, model=model, host=host, port=port)
    setup_logging(settings.log_level, settings.log_format)
    model_path = settings.model or _default_model(settings.cache_dir)
    served = settings.served_model_name or model_path.name
    api = create_app(settings, model_path, served)
    server = DrainingServer(uvicorn.Config(api, host=settings.host, port=settings.port, access_log=False,
                                           log_level=settings.log_level.lower(), log_config=None,
                                           timeout_graceful_shutdown=int(settings.drain_timeout_s) + 5),
                            api.state.service, settings.drain_timeout_s)
    api.state.on_engine_failure = lambda: setattr(server, "should_exit", True)
    _exit_zero_after_graceful_sigterm(server)
    server.run()
    failure = api.state.service.failure
    if failure:
        typer.echo(f"structserve: engine failed to start: {failure}", err=True)
        raise typer.Exit(1)


def _exit_zero_after_graceful_sigterm(server: object) -> None:
    """uvicorn re-raises a signal it handled to the handler that was installed before it ran
    (a SIGTERM during the drain is not re-raised: see service.serving). Ours lets ``serve``
    return, so a graceful stop exits 0 (1 if the engine had failed); a SIGTERM before uvicorn
    started still ends the process at once."""
    import signal

    def handler(signum: int, _frame: object) -> None:
        if not getattr(server, "started", False):
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def _default_model(cache_dir: Optional[Path]) -> Path:
    from service.assets import model_dir
    from service.assets.errors import AssetError

    try:
        return model_dir(DEFAULT_MODEL_ASSET, cache_dir)
    except AssetError as exc:
        typer.echo(f"structserve: cannot prepare the default model: {exc}", err=True)
        raise typer.Exit(1)


@assets_app.command("fetch")
def assets_fetch(
    names: Annotated[Optional[list[str]], typer.Argument(
        help="Assets to fetch (default: smollm2 qwen3-tiny austen). Optional, only when named: qwen2.5-coder."
    )] = None,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Cache directory (default ~/.cache/structserve).")] = None,
) -> None:
    """Download from the registries, verify sha256, convert and cache."""
    from service.assets import ASSET_NAMES, KNOWN_ASSET_NAMES, fetch
    from service.assets.errors import AssetError

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
