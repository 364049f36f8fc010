"""The chat pipeline: typed stages sequenced by ``chat.py`` (see docs/architecture.md)."""
