"""Admission policies at SGLang's prefill adder: ``budget`` reserves each request's
worst-case KV pages before it runs, so decode never runs out of pages and never retracts."""
