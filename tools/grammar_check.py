"""``structserve grammar check``: does a schema compile, and does the compiled grammar
accept given instances token by token?

``grammar_app`` is a Typer app (``tools/cli.py`` mounts it as ``structserve grammar``).
The check runs the fail-closed policy (``check_schema``), compiles in-process with the
exact xgrammar calls the engine uses (``grammars.compile.compiler``), serializes each instance
the way that grammar emits JSON (``grammar_text``), tokenizes it, and walks a
``GrammarMatcher`` through the token ids (each must be allowed by the mask) and a stop
token. Exit code 0 only if the schema compiles and every instance is accepted.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from grammars.json_schema import deref, json_equal

__all__ = ["TokenWalk", "grammar_app", "grammar_text", "walk_tokens"]

grammar_app = typer.Typer(
    help="Grammar tools: JSON-Schema policy and compile checks.", no_args_is_help=True, add_completion=False
)

_MAX_SELECT = 64
_LOG_PREFIX = re.compile(r"^\[[\d:]+\] \S+:\d+: ", re.M)


@grammar_app.callback()
def _group() -> None:
    """Grammar tools: JSON-Schema policy and xgrammar compile checks."""


@dataclass(frozen=True)
class TokenWalk:
    """Result of walking one text through a compiled grammar.

    ``accepted``: every token was allowed and a stop token ended it; ``tokens``: token
    count of the text; ``failed_at``: index of the first refused token (``tokens`` when
    stopping was refused), else None; ``detail``: a human-readable explanation."""

    accepted: bool
    tokens: int
    failed_at: int | None
    detail: str


def walk_tokens(compiled: Any, tokenizer: Any, text: str) -> TokenWalk:
    """Tokenize ``text`` (no special tokens) and feed it through a fresh matcher for
    ``compiled``, checking each token against the filled bitmask, then a stop token."""
    import xgrammar

    ids = tokenizer.encode(text, add_special_tokens=False)
    matcher = xgrammar.GrammarMatcher(compiled)
    bitmask = xgrammar.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
    for index, token in enumerate(ids):
        matcher.fill_next_token_bitmask(bitmask)
        if not _allowed(bitmask, token) or not matcher.accept_token(token):
            prefix = tokenizer.decode(ids[:index])[-40:]
            piece = tokenizer.decode([token])
            return TokenWalk(False, len(ids), index, f"token {index} {piece!r} refused after ...{prefix!r}")
    matcher.fill_next_token_bitmask(bitmask)
    stops = [t for t in matcher.stop_token_ids if _allowed(bitmask, t)]
    if not stops or not matcher.accept_token(stops[0]) or not matcher.is_terminated():
        return TokenWalk(
            False,
            len(ids),
            len(ids),
            "the grammar does not allow stopping after the last token (the text is incomplete for it)",
        )
    return TokenWalk(True, len(ids), None, f"{len(ids)} tokens + stop accepted")


def _allowed(bitmask: Any, token: int) -> bool:
    return bool((int(bitmask[0, token // 32]) >> (token % 32)) & 1)


def grammar_text(instance: Any, schema: Any, *, const_separators: tuple[str, str] = (",", ":")) -> str:
    """``instance`` serialized the way xgrammar emits it for ``schema`` (pass the
    compiled one: ``json.loads(CheckedSchema.canonical)``) with ``any_whitespace=False``:
    ``", "`` / ``": "`` separators; object members in the declared ``properties`` order
    (others after, in instance order); a value under ``const``/``enum`` as the equal
    schema value, compact (llguidance writes it with ``const_separators=(", ", ": ")``);
    integral floats as integers where the schema says ``integer``; ``anyOf``/``oneOf`` take
    the first branch the instance validates against (jsonschema). Best effort for invalid
    instances; never raises for JSON."""
    return _emit(instance, schema, schema, const_separators)


def _emit(value: Any, node: Any, root: Any, seps: tuple[str, str] = (",", ":")) -> str:
    node = _select(value, deref(node, root), root)
    if not isinstance(node, dict):
        node = {}
    if "const" in node or "enum" in node:
        options = [node["const"]] if "const" in node else node.get("enum") or []
        return _compact(next((o for o in options if json_equal(o, value)), value), seps)
    if isinstance(value, dict):
        order = _member_order(node, value)
        parts = [f"{_dump(k)}: {_emit(value[k], _member_schema(node, k), root, seps)}" for k in order]
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, list):
        prefix = node.get("prefixItems") if isinstance(node.get("prefixItems"), list) else []
        items = [
            _emit(v, prefix[i] if i < len(prefix) else node.get("items", {}), root, seps) for i, v in enumerate(value)
        ]
        return "[" + ", ".join(items) + "]"
    types = node.get("type")
    integer_only = types == "integer" or (isinstance(types, list) and "integer" in types and "number" not in types)
    if isinstance(value, float) and value.is_integer() and integer_only:
        return str(int(value))
    return _dump(value)


def _compact(value: Any, seps: tuple[str, str] = (",", ":")) -> str:
    """How xgrammar writes a const/enum value: compact, integral floats as integers,
    other floats with 17 significant digits."""
    item, key = seps
    if isinstance(value, dict):
        return "{" + item.join(f"{_dump(k)}{key}{_compact(v, seps)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + item.join(_compact(v, seps) for v in value) + "]"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else format(value, ".17g")
    return _dump(value)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _select(value: Any, node: Any, root: Any) -> Any:
    """Descend through ``allOf``/``anyOf``/``oneOf`` to the branch used for ``value``."""
    for _ in range(_MAX_SELECT):
        if not isinstance(node, dict):
            return node
        branches = next(
            (node[k] for k in ("allOf", "anyOf", "oneOf") if isinstance(node.get(k), list) and node[k]), None
        )
        if branches is None or "const" in node or "enum" in node:
            return node
        node = deref(_first_valid(value, branches, root), root)
    return node


def _first_valid(value: Any, branches: list[Any], root: Any) -> Any:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(root if isinstance(root, dict) else {})
    for branch in branches:
        try:
            if validator.evolve(schema=branch).is_valid(value):
                return branch
        except Exception:  # noqa: BLE001 - unresolvable branch: try the next one
            continue
    return branches[0]


def _member_order(node: dict[str, Any], value: dict[str, Any]) -> list[str]:
    declared = node.get("properties") if isinstance(node.get("properties"), dict) else {}
    return [k for k in declared if k in value] + [k for k in value if k not in declared]


def _member_schema(node: dict[str, Any], key: str) -> Any:
    declared = node.get("properties")
    if isinstance(declared, dict) and key in declared:
        return declared[key]
    patterns = node.get("patternProperties")
    if isinstance(patterns, dict):
        for pattern, sub in patterns.items():
            try:
                if re.search(pattern, key):
                    return sub
            except re.error:
                continue
    extra = node.get("additionalProperties", node.get("unevaluatedProperties", {}))
    return extra if isinstance(extra, dict) else {}


@grammar_app.command("check")
def check(
    schema: Annotated[Path, typer.Argument(help="JSON Schema file ('-' reads stdin).")],
    instance: Annotated[
        Optional[list[Path]],
        typer.Option("--instance", "-i", help="A JSON instance file to walk through the grammar (repeatable)."),
    ] = None,
    tokenizer: Annotated[
        Optional[Path], typer.Option(help="HF tokenizer/model dir (default: the SmolLM2 asset).")
    ] = None,
    allow_loosening: Annotated[
        bool, typer.Option("--allow-loosening", help="Drop unsupported keywords instead of failing.")
    ] = False,
) -> None:
    """Check SCHEMA against the keyword policy, compile it, and test instances."""
    from grammars.errors import GrammarError
    from grammars.json_schema import check_schema

    document = _load_json(schema)
    try:
        checked = check_schema(document, allow_loosening=allow_loosening)
    except GrammarError as exc:
        _report_error(exc)
        raise typer.Exit(1) from None
    for item in checked.loosened:
        typer.echo(f"loosened: {item.describe()}")
    compiled, tok = _compile(checked.canonical, tokenizer)
    failures = 0
    for path in instance or []:
        failures += not _check_instance(path, _load_json(path), checked.schema, compiled, tok)
    raise typer.Exit(1 if failures else 0)


def _load_json(path: Path) -> Any:
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
        return json.loads(text)
    except (OSError, ValueError) as exc:
        typer.echo(f"cannot read JSON from {path}: {exc}", err=True)
        raise typer.Exit(2) from None


def _report_error(exc: Any) -> None:
    typer.echo(f"{exc.code}: {exc.message}")
    for item in getattr(exc, "unsupported", ()):
        typer.echo(f"  unsupported {item.describe()}")


def _compile(canonical: str, tokenizer_dir: Path | None) -> tuple[Any, Any]:
    """Compile in-process like the engine; exit 1 with xgrammar's message on failure."""
    from grammars.compile import capture_warnings, compile_text, load_compiler

    if tokenizer_dir is None:
        from assets import default_model_dir

        tokenizer_dir = default_model_dir()
    tok, compiler = load_compiler(tokenizer_dir)
    began = time.perf_counter()
    try:
        compiled, warnings = capture_warnings(lambda: compile_text(compiler, "json_schema", canonical))
    except RuntimeError as exc:
        typer.echo(f"grammar_compile_failed: {_LOG_PREFIX.sub('', str(exc)).strip()}")
        raise typer.Exit(1) from None
    for warning in warnings:
        typer.echo(f"unsupported (xgrammar warning): {warning}")
    if warnings:
        raise typer.Exit(1)
    typer.echo(
        f"compiled in {(time.perf_counter() - began) * 1000:.1f} ms "
        f"(tokenizer {tokenizer_dir}, vocab {compiled.tokenizer_info.vocab_size})"
    )
    return compiled, tok


def _check_instance(path: Path, value: Any, schema: Any, compiled: Any, tok: Any) -> bool:
    from jsonschema import Draft202012Validator

    valid = Draft202012Validator(schema).is_valid(value)
    text = grammar_text(value, schema)
    walk = walk_tokens(compiled, tok, text)
    verdict = "accepted" if walk.accepted else "REJECTED"
    typer.echo(
        f"{path}: {verdict} ({walk.detail}); schema-valid: {'yes' if valid else 'no'}; "
        f"text: {text[:80]}{'...' if len(text) > 80 else ''}"
    )
    return walk.accepted
