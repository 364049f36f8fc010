"""Jane Austen's novels from R's ``janeaustenr`` lazy-load database, in pure Python.

The Debian package ships ``data/Rdata.rdx`` (gzip of an XDR-serialized index: per
dataset name, ``[offset, length]`` into ``Rdata.rdb``) and ``data/Rdata.rdb`` (records of a
4-byte big-endian uncompressed length followed by a zlib stream of an XDR-serialized
character vector, one element per line of the novel).

``parse_xdr`` understands the subset of R's serialization format (versions 2 and 3)
those files use; anything else raises ``ConversionError`` naming the type and offset.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assets.errors import AssetError, ConversionError
from assets.layout import is_complete, staging_dir, text_dir, write_marker

__all__ = [
    "BOOKS",
    "EVAL_BOOK",
    "RVector",
    "austen_dir",
    "calibration_text",
    "eval_text",
    "parse_xdr",
    "read_dataset",
    "read_index",
    "write_texts",
]

BOOKS = (
    "sensesensibility",
    "prideprejudice",
    "mansfieldpark",
    "emma",
    "northangerabbey",
    "persuasion",
)
"""The six datasets, in publication order (the order ``calibration_text`` joins them)."""
EVAL_BOOK = "persuasion"

# SEXP type codes (R Internals, "Serialization formats")
SYMSXP, LISTSXP, CHARSXP, LGLSXP, INTSXP, REALSXP, STRSXP, VECSXP = 1, 2, 9, 10, 13, 14, 16, 19
NILVALUE_SXP, REFSXP = 254, 255
_HAS_ATTR, _HAS_TAG = 1 << 9, 1 << 10
_LATIN1_MASK = 1 << 2
_NA_INT = -(2**31)


class RVector(list[Any]):
    """An R vector as a Python list (NA → None) plus its R attributes (e.g. ``names``)."""

    def __init__(self, items: list[Any], attributes: dict[str, Any] | None = None) -> None:
        super().__init__(items)
        self.attributes: dict[str, Any] = attributes or {}


class _Reader:
    """Cursor over one XDR blob; ``refs`` is R's reference table (symbols here)."""

    def __init__(self, blob: bytes) -> None:
        self.blob, self.pos = blob, 0
        self.refs: list[Any] = []

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.blob):
            raise ConversionError(f"R data truncated: need {n} bytes at offset {self.pos}, blob has {len(self.blob)}")
        chunk = self.blob[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def ints(self, n: int) -> tuple[int, ...]:
        return struct.unpack(f">{n}i", self.take(4 * n))

    def length(self) -> int:
        (n,) = self.ints(1)
        if n == -1:  # long vector: two 32-bit halves
            hi, lo = self.ints(2)
            n = (hi << 32) + (lo & 0xFFFFFFFF)
        return n

    def item(self) -> Any:
        """Read one serialized R object (recursive)."""
        at = self.pos
        (flags,) = self.ints(1)
        kind = flags & 0xFF
        if kind == NILVALUE_SXP:
            return None
        if kind == REFSXP:
            index = flags >> 8 or self.ints(1)[0]
            if not 1 <= index <= len(self.refs):
                raise ConversionError(f"bad R reference {index} at offset {at}")
            return self.refs[index - 1]
        if kind == SYMSXP:
            self.refs.append(self.item())
            return self.refs[-1]
        if kind == LISTSXP:
            return self.pairlist(flags)
        if kind == CHARSXP:
            return self.charsxp(flags)
        if kind in _VECTOR_READERS:
            items = _VECTOR_READERS[kind](self, self.length())
            attributes = dict(self.item()) if flags & _HAS_ATTR else {}
            return RVector(items, attributes)
        raise ConversionError(
            f"unsupported R SEXP type {kind} at offset {at} (only NULL, symbols, pairlists and basic vectors are read)"
        )

    def pairlist(self, flags: int) -> list[tuple[str | None, Any]]:
        """A pairlist as ``[(tag, value), ...]``; the CDR chain is read iteratively."""
        cells: list[tuple[str | None, Any]] = []
        while True:
            if flags & _HAS_ATTR:
                self.item()  # attributes of a pairlist cell: not needed
            tag = self.item() if flags & _HAS_TAG else None
            cells.append((tag, self.item()))
            (flags,) = self.ints(1)
            if flags & 0xFF == NILVALUE_SXP:
                return cells
            if flags & 0xFF != LISTSXP:
                raise ConversionError(f"pairlist continues with SEXP type {flags & 0xFF} at offset {self.pos - 4}")

    def charsxp(self, flags: int) -> str | None:
        """A CHARSXP: length -1 is NA_STRING (→ None); latin-1 if so flagged, else UTF-8."""
        (n,) = self.ints(1)
        if n == -1:
            return None
        raw = self.take(n)
        try:
            return raw.decode("latin-1" if (flags >> 12) & _LATIN1_MASK else "utf-8")
        except UnicodeDecodeError as exc:
            raise ConversionError(f"invalid UTF-8 in R string at offset {self.pos - n}") from exc


def _ints(reader: _Reader, n: int) -> list[int | None]:
    return [None if v == _NA_INT else v for v in reader.ints(n)]


def _logicals(reader: _Reader, n: int) -> list[bool | None]:
    return [None if v == _NA_INT else bool(v) for v in reader.ints(n)]


def _reals(reader: _Reader, n: int) -> list[float]:
    return list(struct.unpack(f">{n}d", reader.take(8 * n)))


def _items(reader: _Reader, n: int) -> list[Any]:
    return [reader.item() for _ in range(n)]


_VECTOR_READERS: dict[int, Callable[[_Reader, int], list[Any]]] = {
    LGLSXP: _logicals,
    INTSXP: _ints,
    REALSXP: _reals,
    STRSXP: _items,
    VECSXP: _items,
}


def parse_xdr(blob: bytes) -> Any:
    """Decode one R object serialized in XDR format (``serialize(x, NULL, xdr=TRUE)``).

    Returns None for NULL, ``RVector`` for vectors (STRSXP → ``str | None`` items,
    INTSXP → ``int | None``, LGLSXP → ``bool | None``, REALSXP → float, VECSXP → objects),
    ``[(tag, value)]`` for pairlists. Raises ``ConversionError`` for another format,
    truncated data, trailing bytes or an unsupported SEXP type.
    """
    reader = _Reader(blob)
    if reader.take(2) != b"X\n":
        raise ConversionError("not an XDR R serialization (expected the 'X\\n' header)")
    version, _writer, _min_reader = reader.ints(3)
    if version == 3:
        reader.take(reader.ints(1)[0])  # native encoding name, e.g. b"UTF-8"
    elif version != 2:
        raise ConversionError(f"unsupported R serialization version {version}")
    value = reader.item()
    if reader.pos != len(blob):
        raise ConversionError(f"{len(blob) - reader.pos} trailing bytes after the R object")
    return value


def read_index(rdx: Path) -> dict[str, tuple[int, int]]:
    """``{dataset: (offset, length)}`` from a lazy-load ``.rdx`` file (zlib records only)."""
    index = parse_xdr(gzip.decompress(rdx.read_bytes()))
    try:
        parts = dict(zip(index.attributes["names"], index, strict=True))
        variables, compressed = parts["variables"], parts["compressed"]
        names = variables.attributes["names"]
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ConversionError(f"{rdx}: not a lazy-load index ({exc!r})") from exc
    if list(compressed) not in ([True], [1]):
        raise ConversionError(f"{rdx}: compression {list(compressed)} unsupported (zlib only)")
    return {name: (int(pos[0]), int(pos[1])) for name, pos in zip(names, variables, strict=True)}


def read_dataset(rdb_bytes: bytes, offset: int, length: int) -> Any:
    """Decode the record at ``offset`` of a ``.rdb`` file's bytes (length + zlib stream)."""
    record = rdb_bytes[offset : offset + length]
    if len(record) != length or length < 4:
        raise ConversionError(f"lazy-load record at {offset} (+{length}) is out of bounds")
    (size,) = struct.unpack(">I", record[:4])
    try:
        blob = zlib.decompress(record[4:])
    except zlib.error as exc:
        raise ConversionError(f"lazy-load record at {offset}: bad zlib stream ({exc})") from exc
    if len(blob) != size:
        raise ConversionError(f"lazy-load record at {offset}: {len(blob)} bytes, header says {size}")
    return parse_xdr(blob)


def austen_dir(cache_dir: Path) -> Path:
    """``<cache>/text/austen``: one ``<book>.txt`` per novel."""
    return text_dir(cache_dir) / "austen"


def write_texts(rdx: Path, rdb: Path, out_dir: Path, *, source_sha256: str) -> dict[str, int]:
    """Write ``<out_dir>/<book>.txt`` for the six ``BOOKS`` (lines joined with ``\\n``,
    NA lines empty) atomically with a marker. Returns characters per book."""
    index, data = read_index(rdx), rdb.read_bytes()
    if missing := [b for b in BOOKS if b not in index]:
        raise ConversionError(f"{rdx}: datasets {missing} not found (has {sorted(index)})")
    counts: dict[str, int] = {}
    with staging_dir(out_dir) as tmp:
        for book in BOOKS:
            lines = read_dataset(data, *index[book])
            if not isinstance(lines, RVector) or not all(isinstance(x, str | None) for x in lines):
                raise ConversionError(f"{rdb}: dataset {book} is not a character vector")
            text = "\n".join(line or "" for line in lines) + "\n"
            (tmp / f"{book}.txt").write_text(text, encoding="utf-8")
            counts[book] = len(text)
        write_marker(tmp, "austen", source_sha256)
    return counts


def _read_books(cache_dir: Path, books: tuple[str, ...]) -> str:
    folder = austen_dir(cache_dir)
    if not is_complete(folder):
        raise AssetError(
            f"{folder} is missing or incomplete: run `structserve assets fetch austen`"
            " (or assets.fetch(['austen'])) first"
        )
    return "\n\n".join((folder / f"{b}.txt").read_text(encoding="utf-8") for b in books)


def calibration_text(cache_dir: Path) -> str:
    """The five novels other than Persuasion, joined in ``BOOKS`` order (≈3.5 M chars).
    Raises ``AssetError`` if the texts were not fetched."""
    return _read_books(cache_dir, tuple(b for b in BOOKS if b != EVAL_BOOK))


def eval_text(cache_dir: Path) -> str:
    """Persuasion, held out from calibration. Raises ``AssetError`` if not fetched."""
    return _read_books(cache_dir, (EVAL_BOOK,))
