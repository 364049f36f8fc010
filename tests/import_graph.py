"""The house's import contracts, checked from the source text (pure: ast only).

Every ``import`` counts, at module level or inside a function or a ``TYPE_CHECKING`` block:
a lazy import is still an arrow. The graph is over the project's own modules; external
imports are kept by their top-level name for the purity rule.

Contracts (``check``):
- layers: a package may import only the packages listed under it in ``ALLOWED``;
- purity: the pure modules (``PURE``: mypy's strict ``files``) import none of ``IMPURE_EXTERNAL``;
- no cycles between the project's modules.
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

# Who may import whom (top-level packages of the project; bench and tests are not measured).
ALLOWED: dict[str, frozenset[str]] = {
    "tools": frozenset({"service", "grammars", "runtime_ext", "assets"}),
    "service": frozenset({"grammars", "runtime_ext", "assets"}),
    "grammars": frozenset({"runtime_ext"}),
    "runtime_ext": frozenset(),
    "assets": frozenset(),
}
# Pure logic (parsers, formats, grammar building, the request stages, radix matching, policies): the
# files mypy checks strictly, ``[tool.mypy] files`` in pyproject.toml (a directory: every module under
# it), minus its ``exclude`` regexes (sglang_adapter.py, which imports sglang lazily by design).
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def pure_modules(pyproject: Path = PYPROJECT) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(files or directories, exclude regexes) of ``[tool.mypy]``: the one list of pure modules."""
    mypy = tomllib.loads(pyproject.read_text())["tool"]["mypy"]
    return tuple(mypy["files"]), tuple(mypy.get("exclude", ()))


PURE, PURE_EXCLUDE = pure_modules()
IMPURE_EXTERNAL = frozenset({"torch", "torch_npu", "sglang", "sgl_kernel", "fastapi", "starlette", "uvicorn"})


@dataclass(frozen=True)
class Violation:
    rule: str  # "layer" | "purity" | "cycle"
    where: str  # file path (or the cycle, joined by " -> ")
    detail: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.where}: {self.detail}"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([target] if target else []))


def imports_of(root: Path, path: Path) -> set[str]:
    """Every module name ``path`` imports (``from a import b`` yields ``a`` and ``a.b``)."""
    module, is_package = module_name(root, path), path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(module, is_package, node.level, node.module) if node.level else node.module
            if base:
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


def project_files(root: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for package in ALLOWED:
        for path in sorted((root / package).rglob("*.py")) if (root / package).is_dir() else ():
            if "build" not in path.relative_to(root).parts:
                files[module_name(root, path)] = path
    return files


def graph(root: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(every imported name per module, internal arrows module -> project modules)."""
    files = project_files(root)
    names = {module: imports_of(root, path) for module, path in files.items()}
    internal = {module: {n for n in found if n in files and n != module} for module, found in names.items()}
    return names, internal


def _layer_violations(names: dict[str, set[str]], files: dict[str, Path], root: Path) -> list[Violation]:
    out = []
    for module, found in sorted(names.items()):
        mine = module.split(".")[0]
        for theirs in sorted({n.split(".")[0] for n in found} & ALLOWED.keys() - ALLOWED[mine] - {mine}):
            targets = ", ".join(sorted(n for n in found if n.split(".")[0] == theirs))
            out.append(
                Violation(
                    "layer",
                    files[module].relative_to(root).as_posix(),
                    f"{mine} may not import {theirs} (imports {targets})",
                )
            )
    return out


def is_pure(rel: str, pure: tuple[str, ...] = PURE, exclude: tuple[str, ...] = PURE_EXCLUDE) -> bool:
    """Whether the file ``rel`` (posix, from the root) is one of the pure modules."""
    if any(re.search(pattern, rel) for pattern in exclude):
        return False
    return any(rel == entry or rel.startswith(entry.rstrip("/") + "/") for entry in pure)


def _purity_violations(names: dict[str, set[str]], files: dict[str, Path], root: Path) -> list[Violation]:
    out = []
    for module, found in sorted(names.items()):
        rel = files[module].relative_to(root).as_posix()
        bad = sorted({n.split(".")[0] for n in found} & IMPURE_EXTERNAL)
        if bad and is_pure(rel):
            out.append(Violation("purity", rel, f"pure module imports {', '.join(bad)}"))
    return out


def cycles(internal: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative-safe sizes)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(internal.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(internal):
        if node not in index:
            visit(node)
    return found


def _package_parents(internal: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's ``__init__`` importing its own submodules is not a cycle with them."""
    return {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in internal.items()}


def check(root: Path) -> list[Violation]:
    files = project_files(root)
    names, internal = graph(root)
    out = _layer_violations(names, files, root) + _purity_violations(names, files, root)
    out += [Violation("cycle", " -> ".join(c), "import cycle") for c in cycles(_package_parents(internal))]
    return out
