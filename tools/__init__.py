"""structserve's offline tools and the one ``structserve`` command line (``tools/cli.py``).

Everything here runs outside the server: quantization and KV calibration on a HF model
(``tools/quant``, ``tools/kv_calibrate.py``) and the grammar check (``tools/grammar_check.py``).
May import ``service``, ``grammars``, ``runtime_ext`` and ``assets``; nothing imports ``tools``.
"""
