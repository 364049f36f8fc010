"""The one PD topology of tests/pd, shared by every PD test (package scope): prefill + decode
replicas and smg in PD mode. It costs two engine starts (in parallel) and the gateway's
registration; test_pd_link_down.py runs last and kills the prefill."""

from __future__ import annotations

import pytest

from tests.pd.topology import PDTopology


@pytest.fixture(scope="package")
def pd(assets, tmp_path_factory):
    try:
        import mooncake.engine  # noqa: F401
    except ImportError as exc:  # make pd installs it; make test runs make pd
        raise RuntimeError(f"Mooncake's transfer engine does not load ({exc}): run `make pd`") from exc
    topology = PDTopology.start(assets.qwen3_tiny, tmp_path_factory.mktemp("pd"))
    yield topology
    topology.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed PD test carries the tails of the prefill, decode and gateway logs (a transfer that
    hangs shows only as a client timeout otherwise)."""
    report = yield
    topology = getattr(item, "funcargs", {}).get("pd")
    if report.failed and isinstance(topology, PDTopology):
        for title, text in topology.log_tails():
            report.sections.append((f"pd {title} log", text))
    return report
