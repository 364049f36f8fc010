"""Prefix reuse with combined-block matching."""
