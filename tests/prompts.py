"""The quality question the SmolLM2 tests ask, and why it is phrased so.

"What is the capital of France?" alone is a knife edge for SmolLM2-135M: its first answer token
("The" vs "L'…") is 0.25 nats ahead in bf16 (HF, unquantized), so a different CPU's bf16 rounding
(AMX vs AVX2 kernels) flips it and the answer wanders off ("L'Étoile, la Marseillaise") while
the model still knows the capital. With "Answer in one short sentence." the first token leads by
1.6 nats and every later one by ≥ 4 (the same measurement), so a miss means lost quality, not
rounding."""

CAPITAL_QUESTION = "What is the capital of France? Answer in one short sentence."
CAPITAL_MESSAGES = [{"role": "user", "content": CAPITAL_QUESTION}]
CAPITAL_PREFIX = "The capital of France is"  # a continuation (completions): " Paris" leads by 2.4 nats (bf16, HF)
