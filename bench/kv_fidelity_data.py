"""The prompt sets and the scoring of ``bench/kv_fidelity.py`` (pure: no torch, no sglang).

- ``instructions(text, n)``: chat instructions over sentences of the held-out Austen text
  (*Persuasion*, from the Debian package ``r-cran-janeaustenr`` that ``assets`` fetches and
  verifies): one of eight tasks (summarize, name the speaker, rewrite, mood, ...) applied to a
  sentence of 60–220 characters, in a fixed shuffled order. The model's own bf16 greedy answers
  to them are what the KV modes are scored on, teacher-forced.
- ``short_prompts()``: short factual and instruction prompts whose greedy answers are compared
  whole (capitals, sums, opposites, translations, spelling, general questions), written here;
  "What is the capital of France?" is the first.
"""

from __future__ import annotations

import math
import random

TASKS = (
    "Summarize this sentence in a few words: ",
    "Who is the main person in this sentence? ",
    "Rewrite this sentence in modern English: ",
    "What is the mood of this sentence? ",
    "Explain this sentence to a child: ",
    "Give this sentence a short title: ",
    "What happens in this sentence? ",
    "Name one feeling described in this sentence: ",
)

COUNTRIES = (
    "France", "Germany", "Italy", "Spain", "Japan", "China", "Canada", "Egypt", "Brazil", "Russia",
    "Portugal", "Greece", "Ireland", "Norway", "Sweden", "Poland", "Austria", "Mexico", "India", "Kenya",
)  # fmt: skip
WORDS = (
    "hot", "happy", "early", "light", "strong", "young", "open", "rich", "fast", "high",
    "good", "wet", "loud", "full", "hard", "near", "old", "big", "clean", "first",
)  # fmt: skip
QUESTIONS = (
    "What color is the sky on a clear day?",
    "Who wrote Pride and Prejudice?",
    "What is the largest planet in our solar system?",
    "How many days are in a week?",
    "What is the boiling point of water in Celsius?",
    "What do bees make?",
    "Name a primary color.",
    "What is the freezing point of water in Fahrenheit?",
    "How many legs does a spider have?",
    "What gas do plants take in from the air?",
    "Which ocean is the largest?",
    "What is the chemical symbol for gold?",
    "How many continents are there?",
    "What is the tallest animal?",
    "In which season do leaves fall from trees?",
    "What is the main language spoken in Brazil?",
    "How many hours are in a day?",
    "What instrument has black and white keys?",
    "What is the opposite of north?",
    "Which planet is known as the Red Planet?",
)


def instructions(text: str, n: int = 240, seed: int = 0) -> list[str]:
    """``n`` instructions over distinct sentences of ``text`` (ValueError if it has too few)."""
    sentences = []
    for raw in text.replace("\n", " ").split("."):
        sentence = " ".join(raw.split())
        if 60 <= len(sentence) <= 220:
            sentences.append(sentence + ".")
    if len(sentences) < n:
        raise ValueError(f"the text has {len(sentences)} usable sentences; {n} asked")
    random.Random(seed).shuffle(sentences)
    return [TASKS[i % len(TASKS)] + sentences[i] for i in range(n)]


def short_prompts() -> list[str]:
    """Short prompts with one clear answer each (France's capital first)."""
    prompts = [f"What is the capital of {country}?" for country in COUNTRIES]
    prompts += [f"What is {a} + {b}?" for a, b in zip(range(3, 43, 2), range(5, 85, 4))]
    prompts += [f"What is the opposite of '{word}'?" for word in WORDS]
    prompts += [f"Translate the word '{word}' into French." for word in WORDS]
    prompts += [f"Spell the word '{word}' backwards." for word in WORDS]
    return prompts + list(QUESTIONS)


def kl_coarse(p: dict[int, float], q: dict[int, float]) -> float:
    """KL(p ‖ q) over p's listed tokens plus one bucket for the rest (q must list p's tokens)."""
    kl, p_rest, q_rest = 0.0, 1.0, 1.0
    for tid, lp in p.items():
        pp, lq = math.exp(lp), q[tid]
        kl += pp * (lp - lq)
        p_rest, q_rest = p_rest - pp, q_rest - math.exp(lq)
    p_rest, q_rest = max(p_rest, 1e-12), max(q_rest, 1e-12)
    return kl + p_rest * math.log(p_rest / q_rest)


def top1(row: dict[int, float]) -> int:
    return max(row, key=row.__getitem__)


def score(ref: dict, res: dict, top: int) -> dict:
    """The mode's numbers against the bf16 cache."""
    same = [a == b for a, b in zip(ref["short"], res["short"])]
    agree: list[list[bool]] = []
    kls: list[float] = []
    for ref_req, req in zip(ref["rows"], res["rows"]):
        agree.append([top1(r) == top1(q) for r, q in zip(ref_req, req)])
        kls += [kl_coarse(dict(sorted(r.items(), key=lambda kv: -kv[1])[:top]), q) for r, q in zip(ref_req, req)]
    flat = [x for req in agree for x in req]
    ppl = math.exp(-sum(res["lps"]) / len(res["lps"]))
    base = math.exp(-sum(ref["lps"]) / len(ref["lps"]))
    return {
        "exact": sum(same) / len(same),
        "agree": sum(flat) / len(flat),
        "kl": sum(kls) / len(kls),
        "ppl": ppl,
        "dppl": ppl / base - 1,
        "per_position": agree,
    }
