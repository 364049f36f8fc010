"""Where a sampled stack of structserve's processes spends its time (pure: no torch, no sglang).

``bench/step_cost.py`` samples the scheduler, the front (HTTP + SGLang's tokenizer manager) and
the detokenizer with py-spy; each sample is one stack, outermost frame first, as py-spy's
``--format raw`` writes it (``frame;frame;... count``). ``category`` names the part of a decode
step the innermost matching rule says it is; the order of ``RULES`` is the order of precedence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

# (category, substrings of the stack: any one matches). Model forward first: a sample inside the
# forward is model time whatever scheduler frame called it.
MODEL_RULES = [
    ("model: sampling", ("sampler.py", ";sample (", "sampling_batch_info")),
    ("model: logits", ("logits_processor.py",)),
    ("model: attention", ("runtime_ext/attention", "radix_attention.py", "torch_native_backend.py")),
    ("model: linear + MLP", ("linear.py", "(forward (sglang/srt/layers/activation.py", "LlamaMLP", "mlp")),
]
MODEL_MARKERS = ("forward_batch_generation", "model_runner.py", "(forward (sglang/srt/models/")
SCHEDULER_RULES = [
    ("scheduler: grammar", ("grammar", "xgrammar", "llguidance")),
    ("scheduler: output processing", ("process_batch_result", "stream_output", "output_streamer")),
    ("scheduler: batch + KV alloc", ("get_next_batch_to_run", "prepare_for_decode", "update_running_batch", "alloc")),
    ("scheduler: request intake", ("recv_requests", "process_input_requests", "recv_pyobj")),
]
# a thread whose innermost Python frame is one of these waits (py-spy shows ``Class.method (file:line)``)
WAITS = frozenset({"sleep", "poll", "wait", "select", "_poll", "recv", "recv_pyobj", "recv_multipart", "acquire"})
PARTS = [
    "model: attention",
    "model: linear + MLP",
    "model: logits",
    "model: sampling",
    "model: other",
    "scheduler: batch + KV alloc",
    "scheduler: output processing",
    "scheduler: grammar",
    "scheduler: request intake",
    "scheduler: other",
]


def parse_raw(lines: Iterable[str]) -> Counter:
    """py-spy raw output -> {stack: samples}."""
    stacks: Counter = Counter()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            stacks[stack] += int(count)
    return stacks


def by_thread(stacks: Counter) -> dict[str, Counter]:
    """Split ``--threads`` output (each stack's outermost frame names its thread) per thread."""
    threads: dict[str, Counter] = {}
    for stack, n in stacks.items():
        head, _, rest = stack.partition(";")
        name, body = (head, rest) if head.startswith(("thread ", "process ")) else ("all", stack)
        threads.setdefault(name, Counter())[body] += n
    return threads


def main_thread(stacks: Counter) -> Counter:
    """The scheduler's event-loop thread (the one whose stacks run ``event_loop``), else the
    busiest."""
    threads = by_thread(stacks)
    loops = [t for t in threads.values() if any("event_loop" in s for s in t)]
    return max(loops or list(threads.values()), key=busy, default=Counter())


def leaf(stack: str) -> str:
    return stack.rsplit(";", 1)[-1]


def scheduler_category(stack: str) -> str | None:
    """The part of a step a scheduler sample is in; None when the scheduler is idle (waiting)."""
    if any(m in stack for m in MODEL_MARKERS):
        for name, needles in MODEL_RULES:
            if any(n in stack for n in needles):
                return name
        return "model: other"
    if idle(stack):
        return None
    for name, needles in SCHEDULER_RULES:
        if any(n in stack for n in needles):
            return name
    return "scheduler: other"


def idle(stack: str) -> bool:
    """The innermost frame waits (a poll, a sleep, a lock): the thread does no work."""
    return leaf(stack).split(" (")[0].rsplit(".", 1)[-1] in WAITS


def busy(stacks: Counter) -> int:
    """Samples in which a thread was doing work."""
    return sum(n for s, n in stacks.items() if not idle(s))


def shares(stacks: Counter) -> tuple[dict[str, float], float]:
    """Scheduler samples -> ({part: share of all samples}, idle share)."""
    total = sum(stacks.values()) or 1
    parts: Counter = Counter()
    for stack, n in stacks.items():
        parts[scheduler_category(stack) or "idle"] += n
    return {p: parts[p] / total for p in PARTS}, parts["idle"] / total
