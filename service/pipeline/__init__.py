"""The chat pipeline: stage modules sequenced by ``chat.py``; they share only ``service/types.py``
(see docs/architecture.md)."""
