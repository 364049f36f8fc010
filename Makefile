# Both targets do all set-up on a fresh machine (idempotent; a second run takes seconds).
SHELL := /bin/bash
VENV_PY := .venv/bin/python
STRUCTSERVE := .venv/bin/structserve

.PHONY: setup gateway pd redis assets serve test test-unit lint bench clean

setup:
	@bash scripts/setup.sh

# SGLang's model gateway (smg) in its own venv, .venv-gateway (docs/scale-out.md)
gateway:
	@bash scripts/setup_gateway.sh

# Prefill/decode disaggregation on the CPU: the CUDA-free Mooncake wheel (pinned) and its three
# Debian libraries (apt, only when missing); verifies the transfer engine loads (docs/scale-out.md)
pd: setup
	@bash scripts/setup_pd.sh

# Debian's redis-server for the shared response store's tests (apt, only when missing)
redis:
	@bash scripts/setup_redis.sh

assets: setup
	@$(STRUCTSERVE) assets fetch

# Serves the default model (or $STRUCTSERVE_MODEL); honours every STRUCTSERVE_* variable.
serve: setup
	@$(STRUCTSERVE) serve

# Model-free folders first, on two workers (pytest-xdist: they are CPU-bound Python, no server);
# then everything that starts an engine, one test at a time.
MODEL_FREE := tests/unit tests/grammars
test: assets gateway pd redis lint
	@$(VENV_PY) -m pytest -n 2 $(MODEL_FREE) $(PYTEST_ARGS)
	@$(VENV_PY) -m pytest $(foreach d,$(MODEL_FREE),--ignore=$(d)) $(PYTEST_ARGS)

# Static checks (also the first step of `make test`): lint, format, strict types on the pure packages,
# and the docs site built strict (a broken link, anchor or missing page fails; output in site/).
lint: setup
	@.venv/bin/ruff check .
	@.venv/bin/ruff format --check .
	@.venv/bin/mypy
	@NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet

# Milliseconds-fast logic tests only: no engine, no assets (tests/unit/conftest.py enforces it).
test-unit: setup redis
	@$(VENV_PY) -m pytest tests/unit $(PYTEST_ARGS)

# The docs site with live reload on http://127.0.0.1:8001 (structserve itself uses 8000).
docs: setup
	@NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs serve -a 127.0.0.1:8001

bench: assets
	@$(VENV_PY) bench/serve_overhead.py
	@$(VENV_PY) bench/structured_overhead.py
	@$(VENV_PY) bench/reasoning_overhead.py --mechanism

clean:
	rm -f .venv .venv-gateway
