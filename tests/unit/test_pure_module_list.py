"""One list of pure modules: ``[tool.mypy] files`` in pyproject.toml. mypy checks them strictly and
tests/import_graph.py's purity contract reads the same list, so the two cannot drift apart."""

from __future__ import annotations

from pathlib import Path

from tests.import_graph import PURE, PURE_EXCLUDE, is_pure, pure_modules

ROOT = Path(__file__).resolve().parents[2]


def test_every_listed_pure_module_exists():
    missing = [entry for entry in PURE if not (ROOT / entry).exists()]
    assert not missing, f"[tool.mypy] files names paths that are not in the tree: {missing}"


def test_purity_covers_exactly_what_mypy_checks(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.mypy]\nfiles = ["pkg/sub", "pkg/one.py"]\nexclude = ["pkg/sub/adapter\\\\.py$"]\n')
    pure, exclude = pure_modules(pyproject)
    assert pure == ("pkg/sub", "pkg/one.py")
    assert is_pure("pkg/sub/deep/x.py", pure, exclude) and is_pure("pkg/one.py", pure, exclude)
    assert not is_pure("pkg/sub/adapter.py", pure, exclude)  # mypy's exclude is the purity exception
    assert not is_pure("pkg/subway.py", pure, exclude) and not is_pure("pkg/two.py", pure, exclude)


def test_the_trees_pure_modules_are_mypys():
    assert PURE == pure_modules(ROOT / "pyproject.toml")[0] and PURE_EXCLUDE
    assert is_pure("runtime_ext/state.py") and is_pure("grammars/errors.py")
    assert not is_pure("runtime_ext/parsers/sglang_adapter.py") and not is_pure("service/engine.py")
