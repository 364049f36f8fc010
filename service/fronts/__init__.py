"""The API front doors around the one chat pipeline (pure: no web framework)."""
