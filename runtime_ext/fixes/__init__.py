"""Hooks that fix SGLang 0.5.23 gaps we hit. Each module documents the gap and has a
test that shows it (plugin disabled) and the fix (plugin enabled)."""
