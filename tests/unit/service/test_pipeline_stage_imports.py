"""The pipeline is straight: no stage imports another stage; they share only ``service/types/``.

Read from the source (AST), so the check holds for imports inside functions too. The
orchestrator ``chat.py`` is the one module that imports the stages; a helper module private
to one stage is imported by that stage only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PIPELINE = Path(__file__).resolve().parents[3] / "service" / "pipeline"
PRIVATE_HELPERS = {
    "validate": {"validate_tools", "validate_reasoning", "validate_output_spec", "validate_bootstrap"},
    "choice": {"schema_validation"},
}
STAGES = ("validate", "constraints", "prompt", "plan", "generate", "choice", "resample", "openai_objects")
HELPERS = tuple(h for helpers in PRIVATE_HELPERS.values() for h in sorted(helpers))  # one order in every process


def pipeline_imports(source: str) -> set[str]:
    """The ``service.pipeline`` modules a module's source imports (by their short name)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found.update(n.split(".")[2] for n in names if n.startswith("service.pipeline.") and n.count(".") >= 2)
    return found


def test_every_module_is_a_stage_a_helper_or_the_orchestrator():
    modules = {p.stem for p in PIPELINE.glob("*.py")} - {"__init__"}
    assert modules == set(STAGES) | set(HELPERS) | {"chat"}


@pytest.mark.parametrize("name", STAGES + HELPERS)
def test_a_stage_imports_no_other_stage(name):
    imported = pipeline_imports((PIPELINE / f"{name}.py").read_text())
    assert imported <= PRIVATE_HELPERS.get(name, set())


@pytest.mark.parametrize("module", sorted((PIPELINE.parent / "types").glob("*.py")), ids=lambda p: p.stem)
def test_types_import_no_stage(module):
    assert not pipeline_imports(module.read_text())
    assert "service.pipeline" not in module.read_text()


def test_the_check_sees_an_import_of_another_stage():
    assert pipeline_imports("def f():\n    from service.pipeline.plan import make_plan\n") == {"plan"}
    assert pipeline_imports("import service.pipeline.choice\n") == {"choice"}
