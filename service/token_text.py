"""Token ids -> the text and bytes OpenAI's ``logprobs`` report for each token.

A token is a byte string; decoded alone it may be half a UTF-8 character. ``bytes`` is
the token's exact bytes (byte-level BPE: through the GPT-2 byte alphabet; SentencePiece:
``<0xNN>`` byte tokens and ``▁`` for a space). ``token`` is those bytes as UTF-8 when they
decode, else ``bytes:\\xNN...`` (OpenAI's notation for a partial character).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from service.types.results import TokenLogprob


@lru_cache(maxsize=1)
def _byte_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte (inverted)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def piece_bytes(piece: str, special: bool) -> bytes:
    """The bytes of a vocabulary entry (``convert_ids_to_tokens`` form)."""
    if special:
        return piece.encode("utf-8")
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    alphabet = _byte_alphabet()
    if all(ch in alphabet for ch in piece):
        return bytes(alphabet[ch] for ch in piece)
    return piece.replace("▁", " ").encode("utf-8")


def token_string(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in data)


class TokenTexts:
    """Token text and bytes over a Hugging Face tokenizer, cached per id."""

    def __init__(self, tokenizer: Any):
        self._tok = tokenizer
        self._special = set(getattr(tokenizer, "all_special_ids", ()) or ())
        self._special |= set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
        self._cache: dict[int, tuple[str, tuple[int, ...]]] = {}

    def of(self, token_id: int) -> tuple[str, tuple[int, ...]]:
        found = self._cache.get(token_id)
        if found is None:
            piece = self._tok.convert_ids_to_tokens(int(token_id))
            data = piece_bytes(piece or "", token_id in self._special)
            found = self._cache[token_id] = (token_string(data), tuple(data))
        return found

    def logprobs(self, sampled: list[Any], top: list[Any] | None) -> tuple[TokenLogprob, ...]:
        """SGLang's ``output_token_logprobs`` entries ``(logprob, id, _)`` and, per position,
        ``output_top_logprobs`` ``[(logprob, id, _), ...]`` -> TokenLogprob. Alternatives the
        grammar masked out (logprob -inf) are not listed."""
        out = []
        for i, (logprob, token_id, *_) in enumerate(sampled):
            alternatives = top[i] if top is not None and i < len(top) and top[i] else []
            listed = tuple((*self.of(alt_id), float(alt_lp)) for alt_lp, alt_id, *_ in alternatives if _allowed(alt_lp))
            out.append(TokenLogprob(*self.of(token_id), None if logprob is None else float(logprob), listed))
        return tuple(out)


def _allowed(logprob: float) -> bool:
    """False for a token the grammar masked out (-inf, or the dtype's minimum after a clamp)."""
    return math.isfinite(logprob) and logprob > -1e30
