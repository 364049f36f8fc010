"""Prefix reuse with combined-block matching (issue 7)."""
