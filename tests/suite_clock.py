"""Where the suite's minutes go: wall time per test module and per folder (setup, call and
teardown of each test, so a session server's start counts against the module that first asked
for it), printed after pytest's last line (beside its per-test --durations). `make test` must
stay under 45 minutes; this table says which module to cut first."""

from __future__ import annotations

from collections import defaultdict

import pytest

_MODULE_SECONDS: defaultdict[str, float] = defaultdict(float)
SHOWN = 25


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _MODULE_SECONDS[report.nodeid.split("::", 1)[0]] += report.duration


def folder_totals(module_seconds: dict[str, float]) -> dict[str, float]:
    totals: defaultdict[str, float] = defaultdict(float)
    for module, seconds in module_seconds.items():
        totals[module.rsplit("/", 1)[0] if "/" in module else "."] += seconds
    return dict(totals)


def pytest_unconfigure(config: pytest.Config) -> None:
    """After pytest's last line: CI shows the head and the tail of the output, so the table goes
    where the tail is."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if not _MODULE_SECONDS or reporter is None:
        return
    total = sum(_MODULE_SECONDS.values())
    write = reporter.write_line
    reporter.section("suite clock: wall seconds per folder and per module")
    folders = sorted(folder_totals(_MODULE_SECONDS).items(), key=lambda kv: -kv[1])
    write("  ".join(f"{folder}/ {seconds:.0f}" for folder, seconds in folders))
    ranked = sorted(_MODULE_SECONDS.items(), key=lambda kv: -kv[1])
    for module, seconds in ranked[:SHOWN]:
        write(f"{seconds:7.0f} s {100 * seconds / total:5.1f} %  {module}")
    write(f"{total:7.0f} s in all ({len(_MODULE_SECONDS)} modules)")
