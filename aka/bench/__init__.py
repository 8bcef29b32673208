"""aka.bench: the embedded scorer (screen, sandboxed workers, correctness, timing, score).

Never calls an LLM and never imports ``aka.kb``.
"""

from aka.bench.correctness import (
    TOLERANCES,
    CheckOutcome,
    Tolerance,
    compare_outputs,
    tolerance_for,
)
from aka.bench.paired import PairedComparison, PairedShape
from aka.bench.pipeline import Scorer
from aka.bench.profile import KernelFacts, NcuKernelMetrics, ProfileData
from aka.bench.result import (
    Bound,
    Engagement,
    EvalResult,
    Failure,
    LatencyStats,
    Manifest,
    ScreenFinding,
    ShapeResult,
    Verdict,
)
from aka.bench.screen import ScreenReport, screen_source
from aka.bench.signature import ArgInfo, InputSignature, TensorInfo
from aka.bench.stats import geomean, iqr, latency_stats, median

__all__ = [
    "TOLERANCES",
    "ArgInfo",
    "Bound",
    "CheckOutcome",
    "Engagement",
    "EvalResult",
    "Failure",
    "InputSignature",
    "KernelFacts",
    "LatencyStats",
    "Manifest",
    "NcuKernelMetrics",
    "PairedComparison",
    "PairedShape",
    "ProfileData",
    "Scorer",
    "ScreenFinding",
    "ScreenReport",
    "ShapeResult",
    "TensorInfo",
    "Tolerance",
    "Verdict",
    "compare_outputs",
    "geomean",
    "iqr",
    "latency_stats",
    "median",
    "screen_source",
    "tolerance_for",
]
