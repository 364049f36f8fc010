"""Every pinned package installs on the image's interpreter: `scripts/container.sh` builds the
image on Debian bookworm, whose python3 is 3.11.2, while the host venv may run a newer 3.11 (a pin
whose Requires-Python excludes 3.11.2 installs here and stops the image build)."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, metadata
from pathlib import Path

from packaging.specifiers import SpecifierSet

BOOKWORM_PYTHON = "3.11.2"
REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements"
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)")


def pins() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(REQUIREMENTS.glob("*.txt")):
        for line in path.read_text().splitlines():
            if match := PIN.match(line.strip()):
                found[match[1]] = match[2]
    return found


def test_every_pin_supports_the_image_python() -> None:
    checked, refused = 0, []
    for name, version in pins().items():
        try:
            meta = metadata(name)
        except PackageNotFoundError:
            continue  # not installed on this platform (a marker); pip checks it in the image
        if meta["Version"] != version:
            continue
        checked += 1
        needs = meta.get("Requires-Python")
        if needs and not SpecifierSet(needs).contains(BOOKWORM_PYTHON):
            refused.append(f"{name}=={version} requires Python {needs}")
    assert checked >= 50, f"only {checked} pins matched the installed packages"
    assert not refused, f"not installable on bookworm's Python {BOOKWORM_PYTHON}: {refused}"
