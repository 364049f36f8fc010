"""tests/unit runs with no engine and no assets (`make test-unit` on a fresh checkout).

A unit test that asks for the fetched models fails here with where to put it instead, and
the asset cache is an empty directory of its own, with the registry clients refused: a test
that reads the real cache finds nothing, and one that would download fails at once instead
of fetching. Tests needing the real tokenizers or checkpoints live in tests/offline and
tests/grammars, the engine in tests/engine, a server in tests/api.
"""

from __future__ import annotations

import pytest

WHERE = (
    "unit tests use no assets: move this test to tests/offline (real tokenizers/checkpoints, "
    "no engine), tests/grammars (xgrammar on a real tokenizer), tests/engine or tests/api"
)


@pytest.fixture(scope="session")
def assets():
    pytest.fail(f"the 'assets' fixture in tests/unit: {WHERE}", pytrace=False)


@pytest.fixture(autouse=True)
def _no_asset_cache(monkeypatch, tmp_path_factory):
    from assets import download

    monkeypatch.setenv("STRUCTSERVE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "no-assets"))

    real_command, real_run = download.client_command, download._run_client

    def guarded_run(artifact, dest_dir):
        if download.client_command is real_command:  # a real registry client, not a test's stand-in
            pytest.fail(f"a unit test started a download of {artifact.spec}: {WHERE}", pytrace=False)
        real_run(artifact, dest_dir)

    monkeypatch.setattr(download, "_run_client", guarded_run)
