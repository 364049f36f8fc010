"""The ``serve`` command: the serving package's part of the ``structserve`` command line.

``tools/cli.py`` mounts ``serve`` in the one ``structserve`` app (with the offline tools);
``app`` here holds only ``serve``, for ``python -m service serve``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer

# an engine process died: /ready answers 503 for at least LINGER, requests in flight get their
# error (at most GRACE), then the process exits 1
ENGINE_DEATH_LINGER_S, ENGINE_DEATH_GRACE_S = 1.0, 5.0


def serve(
    model: Annotated[
        Optional[Path], typer.Option(help="Model directory (HF layout). Default: the embedded SmolLM2.")
    ] = None,
    config: Annotated[Optional[Path], typer.Option(help="YAML file overriding configs/default.yaml.")] = None,
    host: Annotated[Optional[str], typer.Option(help="Bind address.")] = None,
    port: Annotated[Optional[int], typer.Option(help="Port.")] = None,
    served_model_name: Annotated[
        Optional[str],
        typer.Option(help="The model id clients (and a gateway in front) send. Default: the directory name."),
    ] = None,
) -> None:
    """Serve the OpenAI-compatible API (fetches the default model on first use)."""
    import uvicorn

    from service.logs import setup_logging
    from service.main import create_app
    from service.serving import DrainingServer
    from service.settings import load_settings

    settings = load_settings(config, model=model, host=host, port=port, served_model_name=served_model_name)
    setup_logging(settings.log_level, settings.log_format)
    _check_sglang_args(settings.engine.sglang_args)
    model_path = settings.model or _default_model(settings.cache_dir)
    served = settings.served_model_name or model_path.name
    api = create_app(settings, model_path, served)
    server = DrainingServer(
        uvicorn.Config(
            api,
            host=settings.host,
            port=settings.port,
            access_log=False,
            log_level=settings.log_level.lower(),
            log_config=None,
            timeout_graceful_shutdown=int(settings.drain_timeout_s) + 5,
        ),
        api.state.service,
        settings.drain_timeout_s,
    )
    api.state.on_engine_failure = lambda: setattr(server, "should_exit", True)
    api.state.on_engine_death = lambda: server.stop_after_inflight(ENGINE_DEATH_LINGER_S, ENGINE_DEATH_GRACE_S)
    _exit_zero_after_graceful_sigterm(server)
    server.run()
    state = api.state.service
    if state.failure:
        typer.echo(f"structserve: engine failed to start: {state.failure}", err=True)
        raise typer.Exit(1)
    if state.engine_death:
        typer.echo(f"structserve: the engine stopped while serving: {state.engine_death}", err=True)
        _exit_at_once(1)


def _exit_at_once(code: int) -> NoReturn:
    """Exit without the interpreter's teardown: the engine is gone and the server has stopped its
    processes; tearing down torch and SGLang takes seconds more on a busy host, and only a restart
    helps now."""
    import logging
    import os
    import sys

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _check_sglang_args(args: dict) -> None:
    """``engine.sglang_args`` against SGLang's ServerArgs before anything starts (exit 2)."""
    from service.engine_args import checked_sglang_args

    try:
        checked_sglang_args(args)
    except ValueError as exc:
        typer.echo(f"structserve: {exc}", err=True)
        raise typer.Exit(2)


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
    from assets import default_model_dir
    from assets.errors import AssetError

    try:
        return default_model_dir(cache_dir)
    except AssetError as exc:
        typer.echo(f"structserve: cannot prepare the default model: {exc}", err=True)
        raise typer.Exit(1)


app = typer.Typer(
    help="structserve: OpenAI-compatible structured generation on SGLang (serve only).", no_args_is_help=True
)
app.callback()(lambda: None)  # a group even with one command: ``python -m service serve ...``
app.command()(serve)
