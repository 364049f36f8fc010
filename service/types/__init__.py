"""Typed objects passed between the pipeline's stages, and the ports the pipeline is given
(engine, chat template, grammar check). Frozen: a stage never mutates its input.

What every stage (``service/pipeline/``) and every adapter behind a port
(``service/engine.py``, ``service/tokenizer.py``, ``service/grammar_check.py``) imports; it
imports no stage. By what they hold: ``request.py`` (the validated request), ``serving.py``
(the served model's formats and limits, fixed at startup), ``plan.py`` (what the engine is
asked to run), ``results.py`` (what it produced, per choice), ``ports.py`` (the protocols).
"""
