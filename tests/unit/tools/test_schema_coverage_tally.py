"""The pure counting of bench/schema_coverage.py: MaskBench files to cases, the sample, and
what outcomes add up to per subset and library."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from schema_coverage_tally import (  # noqa: E402
    ALL,
    VALIDATED,
    Outcome,
    load_cases,
    percentile,
    reason_key,
    reason_keys,
    subset_of,
    tally,
)


def _write(folder: Path, stem: str, tests: list[tuple[bool, object]]) -> None:
    entry = {"schema": {"type": "object", "title": stem}, "tests": [{"valid": v, "data": d} for v, d in tests]}
    (folder / f"{stem}.json").write_text(json.dumps(entry))


def test_subset_names_from_both_file_name_styles() -> None:
    assert subset_of("Github_easy---o10008") == "Github_easy"
    assert subset_of("WashingtonPost---wp_9_Normalized") == "WashingtonPost"
    assert subset_of("BFCL_simple_7") == "BFCL"
    assert subset_of("JME_12") == "JME"


def test_cases_split_instances_by_label_and_filter_subsets(tmp_path: Path) -> None:
    _write(tmp_path, "Kubernetes---a", [(True, {"x": 1}), (False, {"x": "1"}), (False, 3)])
    _write(tmp_path, "Snowplow---b", [])
    (cases,) = load_cases(tmp_path, ["Kubernetes"])
    assert (cases.subset, cases.name) == ("Kubernetes", "Kubernetes---a")
    assert cases.valid == ({"x": 1},) and cases.invalid == ({"x": "1"}, 3)
    assert cases.schema == {"type": "object", "title": "Kubernetes---a"}


def test_limit_is_per_subset_stable_and_not_alphabetical(tmp_path: Path) -> None:
    for i in range(30):
        _write(tmp_path, f"Github_easy---o{i:03d}", [])
    _write(tmp_path, "Snowplow---only", [])
    first = load_cases(tmp_path, limit=5)
    assert [c.name for c in first] == [c.name for c in load_cases(tmp_path, limit=5)]
    easy = [c.name for c in first if c.subset == "Github_easy"]
    assert len(easy) == 5 and easy != [f"Github_easy---o{i:03d}" for i in range(5)]
    assert [c.subset for c in first].count("Snowplow") == 1


def _outcome(subset: str, library: str, served: bool, **kw: object) -> Outcome:
    return Outcome(subset, f"{subset}-{len(kw)}", library, served, **kw)  # type: ignore[arg-type]


def test_tally_counts_instances_of_served_schemas_only_and_totals_all_subsets() -> None:
    outcomes = [
        _outcome("K", "structserve", True, route="llguidance", compile_ms=10.0, valid=3, invalid=4, invalid_accepted=1),
        _outcome("K", "structserve", False, reason="unsupported keywords: uniqueItems", valid=0, invalid=0),
        _outcome("S", "structserve", True, route="xgrammar", compile_ms=30.0, valid=2, invalid=5, valid_refused=2),
        _outcome("S", "xgrammar", True, route="xgrammar", compile_ms=50.0, valid=2, invalid=5),
    ]
    results = tally(outcomes)
    k = results[("K", "structserve")]
    assert (k.schemas, k.served, k.served_pct) == (2, 1, 50.0)
    assert (k.valid, k.invalid, k.invalid_accepted, k.valid_refused) == (3, 4, 1, 0)
    assert k.reasons == {"keyword uniqueItems": 1}
    total = results[(ALL, "structserve")]
    assert (total.schemas, total.served, total.valid, total.invalid) == (3, 2, 5, 9)
    assert (total.valid_refused, total.invalid_accepted) == (2, 1)
    assert total.routes == {"llguidance": 1, "xgrammar": 1} and sorted(total.compile_ms) == [10.0, 30.0]
    assert results[(ALL, "xgrammar")].schemas == 1 and ("K", "xgrammar") not in results


def test_a_validated_schemas_invalid_instances_count_apart_as_caught() -> None:
    outcomes = [
        _outcome("K", "structserve", True, route="llguidance", valid=3, invalid=4, invalid_accepted=0),
        _outcome("K", "structserve", True, route=f"xgrammar{VALIDATED}", valid=2, invalid=5, invalid_accepted=3),
    ]
    k = tally(outcomes)[("K", "structserve")]
    assert (k.served, k.valid, k.invalid, k.invalid_accepted) == (2, 5, 4, 0)
    assert (k.invalid_validated, k.caught) == (5, 3)
    assert k.routes == {"llguidance": 1, f"xgrammar{VALIDATED}": 1}


def test_refusals_are_grouped_by_keyword_with_unknown_keywords_as_one_group() -> None:
    keys = reason_keys("unsupported keywords: minProperties, unknown:self, unknown:_format, uniqueItems")
    assert keys == ["keyword minProperties", "unknown keyword (annotation)", "keyword uniqueItems"]
    assert reason_keys("timeout: no grammar within 10 s of CPU budget") == [
        "timeout: no grammar within N s of CPU budget"
    ]


def test_reason_key_blanks_names_pointers_and_numbers() -> None:
    one = reason_key("RemoteRefError: '$ref' 'http://x/a.json' at /properties/a is not local\nmore")
    two = reason_key("RemoteRefError: '$ref' 'https://y' at /b is not local")
    assert one == two == "RemoteRefError: … … … is not local"


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 99) == 99.0 and percentile(values, 100) == 100.0
    assert percentile([7.0], 99) == 7.0 and math.isnan(percentile([], 50))
