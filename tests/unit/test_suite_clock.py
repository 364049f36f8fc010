from tests.suite_clock import folder_totals


def test_modules_add_up_per_folder():
    seconds = {"tests/api/test_a.py": 2.0, "tests/api/test_b.py": 3.0, "tests/unit/x/test_c.py": 1.5}
    assert folder_totals(seconds) == {"tests/api": 5.0, "tests/unit/x": 1.5}
