"""Exact rewrites: keywords neither grammar library enforces, restated with keywords both
enforce (``rewrite.py`` runs them bottom-up; ``combine.py`` moves assertions beside
``anyOf``/``$ref``/``allOf`` into one schema; ``dependent.py`` restates ``dependentRequired``;
``disjoint.py`` proves ``oneOf`` branches disjoint; ``folding.py`` folds ``enum``/``const`` with
their siblings; ``required.py`` declares undeclared ``required`` names)."""

from grammars.json_schema.rewrites.rewrite import MAX_DEPENDENT, rewrite_exact

__all__ = ["MAX_DEPENDENT", "rewrite_exact"]
