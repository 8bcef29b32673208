from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from aka.core import (
    OFFLINE_ENV_DEFAULTS,
    BenchConfig,
    ConfigError,
    apply_offline_defaults,
    find_project_root,
    load_settings,
)


@pytest.fixture(autouse=True)
def _cwd_without_dotenv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Settings read `.env` from the cwd; a developer's .env in the checkout must not leak in.
    monkeypatch.chdir(tmp_path)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _unset(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # setenv first so monkeypatch records the original state (absent included) and restores it,
    # even though the code under test writes os.environ itself.
    monkeypatch.setenv(name, "placeholder")
    monkeypatch.delenv(name)


def test_load_settings_precedence_init_env_dotenv_yaml_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    profile = _write(
        tmp_path / "profile.yaml",
        "service: {port: 1111, host: yaml-host}\nkb: {top_k: 3}\nbench: {warmup_ms: 11}\n",
    )
    _write(
        tmp_path / ".env",
        "AKA_SERVICE__PORT=2222\nAKA_SERVICE__HOST=dotenv-host\nAKA_KB__TOP_K=4\n",
    )
    monkeypatch.setenv("AKA_SERVICE__PORT", "3333")
    monkeypatch.setenv("AKA_SERVICE__HOST", "env-host")

    settings = load_settings(profile, service={"port": 4444})

    assert settings.service.port == 4444  # init beats env, .env and YAML
    assert settings.service.host == "env-host"  # env beats .env and YAML
    assert settings.kb.top_k == 4  # .env beats YAML
    assert settings.bench.warmup_ms == 11.0  # YAML beats the default
    assert settings.bench.min_samples == BenchConfig().min_samples  # default


def test_load_settings_profile_from_aka_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    profile = _write(tmp_path / "ci.yaml", "bench: {min_samples: 7}\n")
    monkeypatch.setenv("AKA_CONFIG", str(profile))

    assert load_settings().bench.min_samples == 7


def test_load_settings_missing_profile_raises_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("yaml_text", "bad_key"),
    [("bench: {min_sample: 5}\n", "min_sample"), ("benchh: {min_samples: 5}\n", "benchh")],
)
def test_load_settings_profile_typo_names_key(tmp_path: Path, yaml_text: str, bad_key: str) -> None:
    profile = _write(tmp_path / "typo.yaml", yaml_text)

    with pytest.raises(ConfigError, match=bad_key) as info:
        load_settings(profile)

    assert str(profile) in str(info.value)
    assert info.value.code == "config.invalid"


def test_load_settings_bad_env_value_raises_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AKA_BENCH__MIN_SAMPLES", "abc")

    with pytest.raises(ConfigError, match=r"bench\.min_samples"):
        load_settings()


@pytest.mark.parametrize(("value", "workers"), [(None, "auto"), ("2", 2), ("auto", "auto")])
def test_agent_workers_from_the_environment(
    value: str | None, workers: int | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is not None:
        monkeypatch.setenv("AKA_AGENT__WORKERS", value)

    assert load_settings().agent.workers == workers


def test_agent_workers_must_be_positive_or_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AKA_AGENT__WORKERS", "0")

    with pytest.raises(ConfigError, match=r"agent\.workers"):
        load_settings()


def test_bench_config_rejects_max_below_min_samples() -> None:
    with pytest.raises(ValidationError, match="max_samples"):
        BenchConfig(min_samples=100, max_samples=50)
    with pytest.raises(ConfigError, match="max_samples"):
        load_settings(bench={"min_samples": 100, "max_samples": 50})


def test_apply_offline_defaults_sets_missing_keeps_user_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (*OFFLINE_ENV_DEFAULTS, "TRITON_INTERPRET"):
        _unset(monkeypatch, name)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the user's choice wins

    apply_offline_defaults()

    assert os.environ["HF_HUB_OFFLINE"] == "0"
    for name, value in OFFLINE_ENV_DEFAULTS.items():
        if name != "HF_HUB_OFFLINE":
            assert os.environ[name] == value
    assert "TRITON_INTERPRET" not in os.environ
    assert "TRITON_INTERPRET" not in OFFLINE_ENV_DEFAULTS


def test_paths_root_env_overrides_project_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AKA_PATHS__ROOT", str(tmp_path))

    settings = load_settings()

    assert settings.paths.root == tmp_path
    assert settings.paths.configs_dir == tmp_path / "configs"


def test_paths_default_root_is_checkout(repo_root: Path) -> None:
    assert find_project_root() == repo_root
    assert load_settings().paths.root == repo_root


def test_paths_cache_and_runs_isolated_by_conftest() -> None:
    paths = load_settings().paths

    assert paths.cache_dir == Path(os.environ["AKA_PATHS__CACHE_DIR"])
    assert paths.runs_dir == Path(os.environ["AKA_PATHS__RUNS_DIR"])
    assert paths.cache_dir.is_dir()


def test_load_settings_masks_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AKA_LLM__API_KEY", "sk-secret")

    llm = load_settings().llm

    assert llm.api_key is not None
    assert llm.api_key.get_secret_value() == "sk-secret"
    assert "sk-secret" not in repr(llm)
