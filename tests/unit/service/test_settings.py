import pytest
from pydantic import ValidationError

from service.settings import load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    import os

    for key in list(os.environ):
        if key.startswith("STRUCTSERVE_"):
            monkeypatch.delenv(key)


def test_defaults_come_from_yaml():
    s = load_settings()
    assert s.host == "127.0.0.1" and s.engine.page_size == 16 and s.engine.max_total_tokens == 32768


def test_env_overrides_nested_keys(monkeypatch, tmp_path):
    monkeypatch.setenv("STRUCTSERVE_PORT", "9123")
    monkeypatch.setenv("STRUCTSERVE_DTYPE", "float32")
    monkeypatch.setenv("STRUCTSERVE_ENGINE__MAX_TOTAL_TOKENS", "4096")
    monkeypatch.setenv("STRUCTSERVE_ENGINE__PAGE_SIZE", "1")
    monkeypatch.setenv("STRUCTSERVE_MODEL", str(tmp_path))
    s = load_settings()
    assert (s.port, s.dtype, s.engine.max_total_tokens, s.engine.page_size) == (9123, "float32", 4096, 1)
    assert s.model == tmp_path


def test_config_file_then_env_then_cli(monkeypatch, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("port: 7000\nengine:\n  page_size: 4\n")
    monkeypatch.setenv("STRUCTSERVE_CONFIG", str(cfg))
    s = load_settings()
    assert s.port == 7000 and s.engine.page_size == 4 and s.engine.max_total_tokens == 32768
    monkeypatch.setenv("STRUCTSERVE_PORT", "7001")
    assert load_settings().port == 7001
    assert load_settings(port=7002).port == 7002


def test_bad_values_name_the_key(monkeypatch):
    monkeypatch.setenv("STRUCTSERVE_DTYPE", "int3")
    with pytest.raises(ValidationError, match="dtype"):
        load_settings()


def test_unknown_key_in_file_is_an_error(monkeypatch, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("engine:\n  page_sise: 4\n")
    monkeypatch.setenv("STRUCTSERVE_CONFIG", str(cfg))
    with pytest.raises(ValidationError, match="page_sise"):
        load_settings()


def test_missing_model_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("STRUCTSERVE_MODEL", str(tmp_path / "nope"))
    with pytest.raises(ValidationError, match="does not exist"):
        load_settings()


def test_a_reserve_ratio_without_budget_admission_is_refused(monkeypatch):
    monkeypatch.setenv("STRUCTSERVE_SCHEDULING__RESERVE_RATIO", "0.5")
    with pytest.raises(ValidationError, match="reserve_ratio applies to scheduling.admission: budget only"):
        load_settings()
    monkeypatch.setenv("STRUCTSERVE_SCHEDULING__ADMISSION", "budget")
    assert load_settings().scheduling.reserve_ratio == 0.5


def test_responses_store_defaults_and_redis_needs_a_url(monkeypatch):
    from service.settings import ResponsesSettings

    assert load_settings().responses == ResponsesSettings()  # configs/default.yaml == the model's defaults
    assert load_settings().responses.store == "memory"
    monkeypatch.setenv("STRUCTSERVE_RESPONSES__STORE", "redis")
    with pytest.raises(ValidationError, match="responses.redis_url"):
        load_settings()
