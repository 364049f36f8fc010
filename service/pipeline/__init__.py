"""The chat pipeline: stage modules sequenced by ``chat.py``; they share only ``service/types/``
(see docs/architecture.md)."""
