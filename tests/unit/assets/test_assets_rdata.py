"""R XDR serialization reader and the Austen lazy-load DB, on blobs built here byte by byte."""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import pytest

from assets import austen
from assets.austen import BOOKS, RVector, parse_xdr, read_dataset, read_index, write_texts
from assets.errors import AssetError, ConversionError

HEADER_V3 = b"X\n" + struct.pack(">iii", 3, 0x040201, 0x030500) + struct.pack(">i", 5) + b"UTF-8"
NIL = struct.pack(">i", 254)
UTF8, ASCII, LATIN1 = 8 << 12, 64 << 12, 4 << 12  # CHARSXP "levels" encoding flags


def i32(*values: int) -> bytes:
    return struct.pack(f">{len(values)}i", *values)


def charsxp(text: str | None, flags: int = UTF8, encoding: str = "utf-8") -> bytes:
    if text is None:
        return i32(9 | ASCII, -1)
    raw = text.encode(encoding)
    return i32(9 | flags, len(raw)) + raw


def strsxp(items: list[str | None], attrs: bytes = b"") -> bytes:
    flags = 16 | (1 << 9 if attrs else 0)
    return i32(flags, len(items)) + b"".join(charsxp(s) for s in items) + attrs


def names_attr(names: list[str], *, first_use: bool = True) -> bytes:
    """Pairlist ``names = c(...)``; the ``names`` symbol is new (SYMSXP) or ref #1."""
    tag = i32(1) + charsxp("names", ASCII) if first_use else i32((1 << 8) | 255)
    return i32(2 | (1 << 10)) + tag + strsxp(names) + NIL


def test_strsxp_with_na_utf8_and_empty() -> None:
    blob = HEADER_V3 + strsxp(["EMMA", None, "héllo ✓ — ok", ""])
    value = parse_xdr(blob)
    assert isinstance(value, RVector)
    assert value == ["EMMA", None, "héllo ✓ — ok", ""]
    assert value.attributes == {}


def test_latin1_flagged_string_is_decoded_as_latin1() -> None:
    blob = HEADER_V3 + i32(16, 1) + charsxp("café", LATIN1, "latin-1")
    assert parse_xdr(blob) == ["café"]


def test_version2_header_has_no_encoding_field() -> None:
    blob = b"X\n" + i32(2, 0x030000, 0x020300) + strsxp(["a"])
    assert parse_xdr(blob) == ["a"]


def test_vectors_attributes_and_symbol_references() -> None:
    inner = i32(13 | (1 << 9), 2, 7, -(2**31)) + names_attr(["offset", "length"])
    outer = i32(19 | (1 << 9), 2) + inner + i32(10, 1, 1) + names_attr(["pos", "flag"], first_use=False)
    value = parse_xdr(HEADER_V3 + outer)
    assert value == [[7, None], [True]]
    assert value.attributes == {"names": ["pos", "flag"]}
    assert value[0].attributes == {"names": ["offset", "length"]}


def test_real_vector_and_null() -> None:
    assert parse_xdr(HEADER_V3 + i32(14, 2) + struct.pack(">2d", 1.5, -2.0)) == [1.5, -2.0]
    assert parse_xdr(HEADER_V3 + NIL) is None


def test_truncated_blob_is_a_clear_error() -> None:
    blob = HEADER_V3 + strsxp(["hello world"])
    with pytest.raises(ConversionError, match=r"R data truncated: need 11 bytes at offset \d+"):
        parse_xdr(blob[:-3])


def test_unknown_sexp_type_is_named() -> None:
    blob = HEADER_V3 + i32(4, 0)  # ENVSXP
    offset = len(HEADER_V3)
    with pytest.raises(ConversionError, match=f"unsupported R SEXP type 4 at offset {offset}"):
        parse_xdr(blob)


def test_bad_header_trailing_bytes_and_bad_reference() -> None:
    with pytest.raises(ConversionError, match="expected the 'X"):
        parse_xdr(b"B\n" + HEADER_V3[2:] + NIL)
    with pytest.raises(ConversionError, match="4 trailing bytes"):
        parse_xdr(HEADER_V3 + NIL + b"\0\0\0\0")
    with pytest.raises(ConversionError, match="bad R reference 3"):
        parse_xdr(HEADER_V3 + i32((3 << 8) | 255))


def test_invalid_utf8_is_a_conversion_error() -> None:
    with pytest.raises(ConversionError, match="invalid UTF-8"):
        parse_xdr(HEADER_V3 + i32(16, 1, 9 | UTF8, 2) + b"\xff\xfe")


def _lazyload_db(tmp_path: Path, books: dict[str, list[str | None]]) -> tuple[Path, Path]:
    """Write an ``Rdata.rdx``/``Rdata.rdb`` pair shaped like janeaustenr's."""
    records, offsets = b"", []
    for lines in books.values():
        blob = HEADER_V3 + strsxp(lines)
        record = struct.pack(">I", len(blob)) + zlib.compress(blob)
        offsets.append((len(records), len(record)))
        records += record
    variables = i32(19 | (1 << 9), len(books))
    variables += b"".join(i32(13, 2, off, n) for off, n in offsets) + names_attr(list(books))
    references = i32(19 | (1 << 9), 0) + i32(2 | (1 << 10), (1 << 8) | 255) + strsxp([]) + NIL
    index = i32(19 | (1 << 9), 3) + variables + references + i32(10, 1, 1)
    index += names_attr(["variables", "references", "compressed"], first_use=False)
    (tmp_path / "Rdata.rdx").write_bytes(gzip.compress(HEADER_V3 + index))
    (tmp_path / "Rdata.rdb").write_bytes(records)
    return tmp_path / "Rdata.rdx", tmp_path / "Rdata.rdb"


def test_lazyload_index_and_records_roundtrip(tmp_path: Path) -> None:
    rdx, rdb = _lazyload_db(tmp_path, {"emma": ["EMMA", None, "Emma Woodhouse"], "persuasion": ["P"]})
    index = read_index(rdx)
    assert list(index) == ["emma", "persuasion"]
    assert index["emma"][0] == 0
    assert read_dataset(rdb.read_bytes(), *index["emma"]) == ["EMMA", None, "Emma Woodhouse"]
    with pytest.raises(ConversionError, match="out of bounds"):
        read_dataset(rdb.read_bytes(), index["persuasion"][0], 10_000)


def test_write_texts_and_split(tmp_path: Path) -> None:
    books: dict[str, list[str | None]] = {b: [b.upper(), None, f"last line of {b}"] for b in BOOKS}
    rdx, rdb = _lazyload_db(tmp_path, books)
    out = austen.austen_dir(tmp_path / "cache")
    counts = write_texts(rdx, rdb, out, source_sha256="0" * 64)
    assert (out / "persuasion.txt").read_text(encoding="utf-8") == "PERSUASION\n\nlast line of persuasion\n"
    assert counts["emma"] == len("EMMA\n\nlast line of emma\n")
    assert austen.eval_text(tmp_path / "cache") == "PERSUASION\n\nlast line of persuasion\n"
    calibration = austen.calibration_text(tmp_path / "cache")
    assert calibration.startswith("SENSESENSIBILITY\n") and "PERSUASION" not in calibration
    assert calibration.count("last line of") == 5


def test_write_texts_rejects_missing_dataset_and_unfetched_cache(tmp_path: Path) -> None:
    rdx, rdb = _lazyload_db(tmp_path, {"emma": ["x"]})
    out = tmp_path / "out"
    with pytest.raises(ConversionError, match="datasets .*'persuasion'.* not found"):
        write_texts(rdx, rdb, out, source_sha256="0" * 64)
    assert not out.exists()
    with pytest.raises(AssetError, match="structserve assets fetch austen"):
        austen.eval_text(tmp_path / "empty-cache")
