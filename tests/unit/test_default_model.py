"""The default model is named once, ``assets.DEFAULT_MODEL``: no other package spells its asset name."""

from __future__ import annotations

import ast
from pathlib import Path

import assets

ROOT = Path(__file__).resolve().parents[2]


def literal_uses(name: str, packages: tuple[str, ...] = ("service", "tools", "grammars", "runtime_ext")) -> list[str]:
    """``file:line`` of every string constant equal to ``name`` in the packages' modules."""
    found = []
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and node.value == name:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_only_assets_names_the_default_model():
    assert assets.DEFAULT_MODEL in assets.MODEL_NAMES
    assert literal_uses(assets.DEFAULT_MODEL) == [], "use assets.DEFAULT_MODEL / assets.default_model_dir()"


def test_the_scan_finds_a_literal():
    assert literal_uses("model_dir", ("assets",))  # __all__ spells it
