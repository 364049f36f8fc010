"""The layering contracts hold on the tree, and the checker fails on a new violation of each kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import check, cycles

ROOT = Path(__file__).resolve().parents[2]


def test_the_tree_keeps_every_import_contract():
    violations = check(ROOT)
    assert not violations, "import contracts broken:\n" + "\n".join(map(str, violations))


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in ("service", "grammars", "runtime_ext", "tools", "assets"):
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / "__init__.py").touch()
    return tmp_path


CLEAN = {
    "runtime_ext/formats/spec.py": "X = 1\n",
    "grammars/build.py": "from runtime_ext.formats.spec import X\n",
    "service/app.py": "import fastapi\nfrom grammars import build\n",
    "tools/cli.py": "from service import app\nimport torch\n",
}


def test_a_clean_tree_passes(tmp_path):
    assert check(_tree(tmp_path, CLEAN)) == []


@pytest.mark.parametrize(
    "rel, text, rule",
    [
        ("runtime_ext/plugin.py", "from service import app\n", "layer"),  # runtime_ext never imports service
        ("service/engine.py", "def f():\n    from tools.cli import main\n", "layer"),  # lazy imports count
        ("grammars/compile/compiler.py", "import assets.download\n", "layer"),
        ("assets/layout.py", "from runtime_ext.formats import spec\n", "layer"),  # assets is a leaf
        ("runtime_ext/parsers/core.py", "import torch\n", "purity"),
        ("service/pipeline/plan.py", "from sglang.srt import x\n", "purity"),
        ("grammars/json_schema/keywords.py", "from fastapi import HTTPException\n", "purity"),
    ],
)
def test_the_checker_fails_on_a_new_violation(tmp_path, rel, text, rule):
    violations = check(_tree(tmp_path, {**CLEAN, rel: text}))
    assert [v.rule for v in violations] == [rule], violations
    assert rel in violations[0].where


def test_the_checker_finds_a_cycle_through_relative_and_lazy_imports(tmp_path):
    root = _tree(
        tmp_path,
        {
            **CLEAN,
            "runtime_ext/kv_cache/__init__.py": "",
            "runtime_ext/kv_cache/methods.py": "from .hooks import ENV\n",
            "runtime_ext/kv_cache/hooks.py": "def f():\n    from runtime_ext.kv_cache.methods import METHODS\n",
        },
    )
    assert [v.where for v in check(root)] == ["runtime_ext.kv_cache.hooks -> runtime_ext.kv_cache.methods"]


def test_a_package_importing_its_own_submodules_is_no_cycle(tmp_path):
    root = _tree(tmp_path, {**CLEAN, "grammars/__init__.py": "from grammars.build import X\n"})
    assert check(root) == []


def test_cycles_of_three():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
