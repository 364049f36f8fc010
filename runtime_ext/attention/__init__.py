"""runtime_ext's attention backend (replaces SGLang's ``torch_native`` factory; see native.py)."""
