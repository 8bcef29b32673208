"""Settings: one ``Settings`` object made of section models (STYLE K1-K6).

Owns reading the environment, ``.env`` and YAML profiles, the offline defaults every entry point
applies, and the resolution of the project-data root (``PathsConfig.root``). Only this module reads
the environment for settings. Must not import torch, triton or any other heavy library.

Precedence, highest first: explicit arguments > environment (``AKA_<SECTION>__<KEY>``) > ``.env`` >
YAML profile (``--config``/``AKA_CONFIG``: a path, or a name under ``configs/``) > model defaults.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from aka.core.errors import ConfigError

__all__ = [
    "MULTICAST_OFF_ENV",
    "OFFLINE_ENV_DEFAULTS",
    "AgentConfig",
    "BenchConfig",
    "KBConfig",
    "LLMConfig",
    "PathsConfig",
    "ServiceConfig",
    "Settings",
    "ToolsConfig",
    "apply_offline_defaults",
    "find_project_root",
    "load_settings",
]

#: Variables that keep the libraries from reaching the network (ENVIRONMENT.md).
#: ``TRITON_INTERPRET`` is deliberately absent: it is set only inside CPU scorer workers.
OFFLINE_ENV_DEFAULTS: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "ANONYMIZED_TELEMETRY": "False",
    "ORT_DISABLE_TELEMETRY": "1",
    # transformers' per-load "Loading weights" bars would break the CLI's live view
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}

#: Variables every process aka starts on a GPU host gets (scorer workers, job processes): NVLink
#: multicast (NVLS) stays off, so the GPUs of one host never share multicast objects.
MULTICAST_OFF_ENV: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
}

_APP_NAME = "aka"
_PROJECT_MARKERS = ("configs", "pyproject.toml")


def apply_offline_defaults() -> None:
    """Set the offline variables unless the user already set them (``os.environ.setdefault``)."""
    for key, value in OFFLINE_ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)


def find_project_root() -> Path:
    """Return where project data lives: the source checkout, else the copy packaged in the wheel.

    ``AKA_PATHS__ROOT`` is applied by ``PathsConfig`` itself; this is the fallback.
    """
    package_dir = Path(__file__).resolve().parent.parent
    checkout = package_dir.parent
    if all((checkout / marker).exists() for marker in _PROJECT_MARKERS):
        return checkout
    packaged = package_dir / "_project"
    if packaged.is_dir():
        return packaged
    return checkout


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class PathsConfig(_Section):
    """Where aka reads project data and writes caches and runs."""

    root: Path = Field(
        default_factory=find_project_root,
        description="Project data root holding configs/, reference_kernels/, knowledge_base/.",
    )
    cache_dir: Path = Field(
        default_factory=lambda: Path(platformdirs.user_cache_dir(_APP_NAME)),
        description="Cache for measured ceilings, baseline times and the KB index.",
    )
    runs_dir: Path = Field(
        default_factory=lambda: Path(platformdirs.user_data_dir(_APP_NAME)) / "runs",
        description="Where optimization runs write kernels, reports and checkpoints.",
    )

    @property
    def configs_dir(self) -> Path:
        """The ``configs/`` folder under the root."""
        return self.root / "configs"


class BenchConfig(_Section):
    """Knobs of the embedded scorer (timing, sandbox, correctness)."""

    seeds: list[int] = Field(default=[0, 1, 2], min_length=3, description="Correctness seeds.")
    compile_timeout_s: float = Field(default=300.0, gt=0, description="Import + first call.")
    worker_timeout_s: float = Field(default=900.0, gt=0, description="Whole worker wall time.")
    cpu_time_limit_s: int = Field(default=1800, gt=0, description="RLIMIT_CPU of a worker.")
    file_size_limit_mb: int = Field(default=4096, gt=0, description="RLIMIT_FSIZE of a worker.")
    open_files_limit: int = Field(default=4096, gt=0, description="RLIMIT_NOFILE of a worker.")
    address_space_limit_gb: float | None = Field(
        default=None, description="RLIMIT_AS of a CPU worker (GPU workers need none)."
    )
    warmup_ms: float = Field(default=50.0, ge=0, description="Warm-up by time before samples.")
    min_samples: int = Field(default=100, ge=5, description="Timed samples per shape, at least.")
    max_samples: int = Field(default=1000, ge=5, description="Timed samples per shape, at most.")
    sample_budget_s: float = Field(default=1.5, gt=0, description="Time budget for samples.")
    l2_flush_factor: float = Field(default=2.0, ge=2.0, description="L2 flush buffer / L2 size.")
    l2_flush_mode: Literal["read", "write"] = Field(
        default="read", description="Evict L2 by reading a buffer (clean lines) or writing it."
    )
    rotating_sets: int = Field(default=3, ge=1, description="Input sets at distinct addresses.")
    host_lead_us: float = Field(
        default=50.0,
        ge=0,
        description="GPU busy-wait queued after the L2 flush, so host launch overhead up to the "
        "flush time plus this stays outside the window (the window times the device, as ncu does).",
    )
    mismatch_abs_us: float = Field(default=5.0, ge=0, description="timing_mismatch: absolute.")
    mismatch_rel: float = Field(default=0.10, ge=0, description="timing_mismatch: share of T.")
    suspicious_min_margin: float = Field(default=0.10, ge=0, description="m's lower bound.")
    torch_compile_baseline: bool = Field(default=True, description="Time torch.compile too.")
    ceilings: Literal["measured", "datasheet"] = Field(
        default="measured", description="Which hardware ceilings price T_sol."
    )
    cold_recheck: Literal["always", "gpu", "never"] = Field(
        default="gpu",
        description="Re-check final results in cold workers (fresh seeds, empty caches): always, "
        "only when timing on a GPU, or never.",
    )
    cold_max_slowdown: float = Field(
        default=1.25, gt=1.0, description="Cold median / first median above this: not_reproduced."
    )
    holdout_seed: int | None = Field(
        default=None,
        description="Seed of the generated holdout shapes; keep it private (a user setting, never "
        "in a repository). None: a random seed made once and kept in the cache dir.",
    )
    holdout_shapes: int = Field(
        default=8, ge=6, description="Generated holdout shapes per operator (six categories)."
    )
    holdout_memory_cap_gb: float = Field(
        default=16.0, gt=0, description="Largest inputs + outputs of a generated holdout shape."
    )

    @model_validator(mode="after")
    def _samples_ordered(self) -> BenchConfig:
        if self.max_samples < self.min_samples:
            raise ValueError(
                f"max_samples ({self.max_samples}) < min_samples ({self.min_samples}); "
                "raise max_samples or lower min_samples"
            )
        return self


class LLMConfig(_Section):
    """The language model the agent's LLM proposer calls through litellm."""

    model: str | None = Field(default=None, description="litellm model string; None = search.")
    api_base: str | None = Field(default=None, description="OpenAI-compatible server URL.")
    api_key: SecretStr | None = Field(default=None, description="Provider key (never logged).")
    temperature: float = Field(default=0.7, ge=0, le=2)
    max_retries: int = Field(default=3, ge=0)
    timeout_s: float = Field(default=600.0, gt=0, description="One completion call, seconds.")
    max_output_tokens: int = Field(default=8192, ge=256)


class AgentConfig(_Section):
    """The optimization loop: budgets, stop rule, dropout and the promotion rule."""

    max_iters: int = Field(default=8, ge=1, description="Propose/evaluate rounds at most.")
    wall_time_s: float | None = Field(default=None, gt=0, description="Wall-clock budget.")
    max_tokens: int | None = Field(default=None, ge=1, description="LLM tokens (in + out).")
    max_cost_usd: float | None = Field(default=None, gt=0, description="LLM cost (litellm).")
    max_gpu_s: float | None = Field(default=None, gt=0, description="Seconds of GPU work.")
    target_sol: float | None = Field(
        default=0.9, gt=0, le=1, description="Stop when the incumbent reaches this SOL fraction."
    )
    candidates_per_round: int = Field(default=2, ge=1, le=16)
    workers: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        default="auto",
        description="Candidates of a round scored at once, one per GPU: 'auto' = every visible "
        "GPU (CUDA_VISIBLE_DEVICES, else all), 1 in the CPU interpreter; N = the first N visible "
        "GPUs (never more than one evaluation per GPU), or N interpreter evaluations on the CPU.",
    )
    patience: int = Field(default=3, ge=1, description="Stalled rounds before a dropout.")
    dropout: bool = Field(default=True, description="Switch optimization dropout on or off.")
    dropout_mask_fraction: float = Field(default=0.5, ge=0, le=1)
    seed: int = Field(default=0)
    pairs: int = Field(default=3, ge=3, description="ABAB pairs in the promotion re-measure.")
    noise_floor: float = Field(
        default=0.01, ge=0, description="Smallest relative gain a promotion must clear."
    )
    max_history_prompt: int = Field(default=12, ge=1, description="History lines in a prompt.")
    ncu: bool = Field(default=True, description="Profile with Nsight Compute when ncu exists.")
    cpu_stop_when_correct: bool = Field(
        default=True,
        description="In the CPU interpreter nothing is timed: stop once a correct kernel exists.",
    )


class KBConfig(_Section):
    """Knowledge-base index location and retrieval knobs."""

    index_dir: Path | None = Field(default=None, description="Chroma path; None = cache dir.")
    embedding_cache: Path | None = Field(
        default=None,
        description="SQLite file of cached embeddings (shared by every index); "
        "None = <cache dir>/kb-embeddings.sqlite.",
    )
    top_k: int = Field(default=8, ge=1)


class ServiceConfig(_Section):
    """The REST service: where it listens, where it keeps jobs, and its limits."""

    host: str = Field(default="127.0.0.1")
    port: int = Field(default=8000, ge=1, le=65535)
    data_dir: Path | None = Field(
        default=None,
        description="Job store (service.sqlite) and job directories; None = <data dir>/service.",
    )
    database_url: SecretStr | None = Field(
        default=None,
        description="postgresql://user:password@host/db for a shared job store; None = SQLite "
        "in data_dir.",
    )
    workers: int | Literal["auto"] = Field(
        default="auto",
        description="Job slots: 'auto' = one per visible GPU (CUDA_VISIBLE_DEVICES), 1 without.",
    )
    max_attempts: int = Field(default=3, ge=1, description="Tries per job when its worker dies.")
    max_request_bytes: int = Field(default=1_000_000, ge=1024, description="Largest request body.")
    rate_limit_per_minute: int = Field(
        default=120, ge=1, description="Requests per token per minute (a token bucket)."
    )
    cors_origins: list[str] = Field(default_factory=list, description="Allowed origins; [] = off.")
    runner: str = Field(
        default="aka.service.runner:run_job",
        description="module:function that runs one job in its worker process (tests swap it).",
    )
    poll_interval_s: float = Field(default=0.2, gt=0, description="Queue and event polling.")
    use_kb: bool = Field(
        default=True, description="Whether jobs' agents read the knowledge base (needs its index)."
    )
    ray_address: str | None = Field(
        default=None,
        description="Run the job slots as Ray actors on this cluster: 'auto', 'host:port' or "
        "'ray://host:port' (pip install 'aka[ray]'); None = local processes. Actors on other "
        "hosts need database_url (PostgreSQL).",
    )

    def resolved_data_dir(self) -> Path:
        """The data directory, defaulting under the user data dir."""
        return self.data_dir or Path(platformdirs.user_data_dir(_APP_NAME)) / "service"


class ToolsConfig(_Section):
    """The tool adapters (``aka mcp``, LangChain, OpenAI): which aka service they call, and how."""

    url: str = Field(
        default="http://127.0.0.1:8000", description="Base URL of the aka service (`aka serve`)."
    )
    token: SecretStr | None = Field(
        default=None, description="Bearer token (`aka token create`; never logged)."
    )
    request_timeout_s: float = Field(default=30.0, gt=0, description="One HTTP request, seconds.")
    job_timeout_s: float = Field(
        default=3600.0, gt=0, description="Waiting for a job or evaluation to finish, seconds."
    )


class Settings(BaseSettings):
    """All of aka's settings; build with ``load_settings`` (never at import time)."""

    model_config = SettingsConfigDict(
        env_prefix="AKA_",
        env_nested_delimiter="__",
        env_file=".env",
        extra="forbid",
        validate_default=True,
    )

    paths: PathsConfig = Field(default_factory=PathsConfig)
    bench: BenchConfig = Field(default_factory=BenchConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    kb: KBConfig = Field(default_factory=KBConfig)
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Order the sources: init > env > .env > YAML profile > defaults."""
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings, dotenv_settings]
        profile = _active_profile
        if profile is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=profile))
        return tuple(sources)


_active_profile: Path | None = None


def _resolve_profile(path_or_name: str | Path) -> Path:
    candidate = Path(path_or_name)
    if candidate.suffix in (".yaml", ".yml") or candidate.parent != Path("."):
        resolved = candidate
    else:
        root = os.environ.get("AKA_PATHS__ROOT")
        configs = Path(root) / "configs" if root else PathsConfig().configs_dir
        resolved = configs / f"{candidate}.yaml"
    if not resolved.is_file():
        raise ConfigError(
            f"settings profile '{path_or_name}' not found (looked at {resolved}); pass a YAML "
            "path or the name of a file in configs/ to --config or AKA_CONFIG"
        )
    return resolved


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Build the settings from every source.

    Args:
        path: A YAML profile path or a profile name in ``configs/``; default ``AKA_CONFIG``.
        **overrides: Explicit values (the highest precedence), by section.

    Returns:
        The validated settings.

    Raises:
        ConfigError: A profile is missing or a value is invalid (the message names the key).
    """
    global _active_profile
    chosen = path if path is not None else os.environ.get("AKA_CONFIG")
    _active_profile = _resolve_profile(chosen) if chosen else None
    try:
        return Settings(**overrides)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()
        )
        where = f" (profile {_active_profile})" if _active_profile else ""
        raise ConfigError(f"invalid settings{where}: {problems}") from err
    finally:
        _active_profile = None
