"""``SearchProposer``: the offline proposer, a seeded search over reference-kernel designs.

Owns the choice of what to try next when no LLM is configured: it loads the reference kernels of
the problem's operator family (``aka.kb.load_kernels``), ranks them (the knowledge base's retriever
when given, else a lexical match against the problem), adapts each one to the problem's input
signature (``aka.agent.adapt``), and searches design x tuning config by successive halving. First
rounds try each design's default config, best-ranked first; later rounds explore the tuning space
around the best-scoring designs, halving the designs they keep each refinement round. Every choice
is a pure function of the proposal context (history with scores, tried sources, round, seed), so a
resumed run proposes what the interrupted one would have. Never calls an LLM and never evaluates:
the graph does.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aka.agent.adapt import AdaptError, adapt_kernel
from aka.agent.records import CandidateRecord, Proposal, ProposalBatch, ProposalContext
from aka.agent.runtime import sha256
from aka.bench import InputSignature, screen_source
from aka.kb import KBFilter, LoadedKernel, Retriever, load_kernels
from aka.spec import OpFamily

__all__ = ["SearchProposer", "infer_op_family"]

logger = logging.getLogger(__name__)

#: (family, pattern, weight): evidence in a reference's source that it belongs to a family.
_FAMILY_PATTERNS: tuple[tuple[str, str, float], ...] = (
    ("attention", r"scaled_dot_product_attention|flash_attn|attention", 5),
    ("rope", r"rotary|\brope\b|cos_sin|rotate_half", 5),
    ("conv", r"conv[123]d|convolution", 5),
    ("cache", r"slot_mapping|kv_cache|key_cache|reshape_and_cache", 5),
    ("moe", r"\bexperts?\b|topk_ids|router|gating", 4),
    ("quantization", r"float8|\bfp8\b|e4m3|e5m2|quantiz|quantis|\bint8\b", 4),
    ("norm", r"layer_?norm|rms_?norm|group_?norm|batch_?norm", 4),
    ("norm", r"rsqrt|\.var\(|variance|normali[sz]e", 3),
    ("softmax", r"log_softmax|\bsoftmax\b", 3),
    ("activation", r"\bsilu\b|\bgelu\b|\brelu\b|swiglu|\bmish\b|hardswish|leaky_relu", 3),
    ("gemm", r"\bmatmul\b|\bF\.linear\b|\blinear\(|\bmm\(|\bbmm\(|addmm|einsum|\s@\s", 3),
    ("embedding", r"embedding", 3),
    ("sampling", r"top_k|\btopk\b|top_p|multinomial|sampl", 2),
    ("scan", r"cumsum|cumprod|\bscan\b", 2),
    ("sort", r"\bsort\b|argsort", 2),
    ("activation", r"sigmoid|tanh", 1),
    ("reduction", r"\.sum\(|\.amax\(|\.max\(|\.mean\(", 1),
)
_STOP = frozenset(["the", "and", "with", "for", "per", "one", "into", "from", "that", "its"])
_WORD = re.compile(r"[a-z][a-z0-9]*")
_HEADER_FAMILY = re.compile(r"\b([a-z]+) kernel in [a-z]+\b")
#: Extra configs a design that never passed may still get (its tuning can change numerics).
_RETRY_FAILED = 3
#: Tuning spaces up to this size are enumerated (shuffled); larger ones are sampled.
_ENUMERATE_MAX = 512
_SAMPLES = 64


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.replace("_", " ").lower()) if w not in _STOP}


def infer_op_family(
    reference_source: str,
    retriever: Retriever | None = None,
    *,
    families: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """Guess a reference's operator family from its source (and the KB's kernels, when given).

    Args:
        reference_source: The problem's reference code.
        retriever: Ranks reference kernels by similarity to the source; their families vote.
        families: Kernel id -> op family, to read the retriever's hits (else read from the hits).

    Returns:
        The family (an ``OpFamily`` value) and the evidence, in words.
    """
    text = reference_source.lower()
    scores: dict[str, float] = {}
    evidence: dict[str, list[str]] = {}
    for family, pattern, weight in _FAMILY_PATTERNS:
        found = sorted({m.group(0).strip() for m in re.finditer(pattern, text)})
        if found:
            scores[family] = scores.get(family, 0.0) + weight
            evidence.setdefault(family, []).extend(found)
    votes: list[str] = []
    if retriever is not None:
        hits = retriever.search(reference_source[:2000], k=8, filters=KBFilter(kind="kernel"))
        for rank, hit in enumerate(hits):
            voted = (families or {}).get(hit.id) or _hit_family(hit.text, hit.source)
            if voted:
                scores[voted] = scores.get(voted, 0.0) + 2.0 / (rank + 1)
                votes.append(f"{hit.id}->{voted}")
    if not scores:
        return OpFamily.OTHER.value, "no operator keyword in the reference source"
    best = max(scores, key=lambda f: (scores[f], -_priority(f)))
    parts = [f"keywords {evidence[best][:5]}"] if best in evidence else []
    if votes:
        parts.append(f"similar kernels {votes[:4]}")
    return best, f"'{best}' (score {scores[best]:.1f}) from " + "; ".join(parts)


def _priority(family: str) -> int:
    return next((i for i, (f, _, _) in enumerate(_FAMILY_PATTERNS) if f == family), 99)


def _hit_family(text: str, source: str) -> str | None:
    known = {f.value for f in OpFamily}
    match = _HEADER_FAMILY.search(text)
    if match and match.group(1) in known:
        return match.group(1)
    parts = Path(source).parts
    return parts[-2] if len(parts) >= 2 and parts[-2] in known else None


def _config_key(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True)


@dataclass
class _Stats:
    """What the history says about one design."""

    tried: set[str] = field(default_factory=set)
    accepted: list[CandidateRecord] = field(default_factory=list)
    failed: int = 0
    refined_rounds: set[int] = field(default_factory=set)

    def best_score(self) -> float:
        best = self.best(True)
        score = _record_score(best) if best is not None else None
        return score if score is not None else 0.0

    def best(self, measured: bool) -> CandidateRecord | None:
        if not self.accepted:
            return None
        if not measured:
            return self.accepted[0]
        return max(self.accepted, key=lambda r: (_record_score(r) or 0.0, -r.round))


def _record_score(record: CandidateRecord) -> float | None:
    return record.score if record.score is not None else record.speedup_eager


@dataclass(frozen=True)
class _Choice:
    kernel: LoadedKernel
    params: dict[str, Any]
    rationale: str


def _default_config(kernel: LoadedKernel) -> dict[str, Any]:
    return {k: v[0] for k, v in kernel.meta.tuning.items()}


def _steps(values: list[Any], current: Any) -> list[Any]:
    """Values next to ``current``: the adjacent ones in numeric order, else every other value."""
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if not numeric or current not in values:
        return [v for v in values if v != current]
    ordered = sorted(set(values))
    i = ordered.index(current)
    return [ordered[j] for j in (i + 1, i - 1) if 0 <= j < len(ordered)]


def _space(kernel: LoadedKernel, rng: random.Random) -> Iterator[dict[str, Any]]:
    """Configs of the whole tuning space: all of them (shuffled) when few, else a sample."""
    tuning = kernel.meta.tuning
    size = math.prod(len(v) for v in tuning.values())
    if size <= _ENUMERATE_MAX:
        configs = [dict(zip(tuning, c, strict=True)) for c in itertools.product(*tuning.values())]
        rng.shuffle(configs)
        yield from configs
    else:
        for _ in range(_SAMPLES):
            yield {k: rng.choice(v) for k, v in tuning.items()}


def _around(
    kernel: LoadedKernel, base: dict[str, Any], rng: random.Random
) -> Iterator[tuple[dict[str, Any], str]]:
    """Configs near ``base`` (one parameter one step away), then the rest of the space."""
    for name, values in kernel.meta.tuning.items():
        for value in _steps(values, base.get(name)):
            yield base | {name: value}, f"{name} {base.get(name)} -> {value}"
    for config in _space(kernel, rng):
        yield config, "a sample of the tuning space"


def _refinements(
    kernel: LoadedKernel, stats: _Stats, measured: bool, rng: random.Random, why: str
) -> Iterator[_Choice]:
    best = stats.best(measured)
    base = dict(best.params) if best is not None else _default_config(kernel)
    score = _record_score(best) if best is not None and measured else None
    label = f"{why} {kernel.meta.id} around its best config" + (
        f" (score {score:.3g})" if score is not None else ""
    )
    for config, change in _around(kernel, base, rng):
        if _config_key(config) not in stats.tried:  # skipped here, so round-robin stays fair
            yield _Choice(kernel, config, f"{label}: {change}")


def _retries(kernel: LoadedKernel, stats: _Stats, rng: random.Random) -> Iterator[_Choice]:
    """A few configs near the default of a design that never passed (tuning can fix numerics)."""
    budget = max(0, _RETRY_FAILED - (len(stats.tried) - 1))
    fresh = (
        c
        for c in _around(kernel, _default_config(kernel), rng)
        if _config_key(c[0]) not in stats.tried
    )
    for config, change in itertools.islice(fresh, budget):
        yield _Choice(kernel, config, f"{kernel.meta.id} never passed yet: retry, {change}")


class SearchProposer:
    """Instantiate reference kernels of the problem's family and search their tuning space.

    Args:
        kernels_root: ``reference_kernels/`` (read as text, never imported).
        signature: The problem's input signature (``Scorer.input_signature``).
        retriever: Ranks designs (the knowledge base); None ranks by a lexical match.
        seed: Mixed with the context's seed for every random choice.
        op_family: Overrides the spec's family (else the spec's, else inferred).
        arch: Keep kernels declared for this arch (None: the context's arch, if any).
        dtype: Keep kernels that declare this dtype (None: any).
    """

    name = "search"

    def __init__(
        self,
        kernels_root: Path,
        signature: InputSignature,
        *,
        retriever: Retriever | None = None,
        seed: int = 0,
        op_family: str | None = None,
        arch: str | None = None,
        dtype: str | None = None,
    ) -> None:
        self.kernels_root = kernels_root
        self.signature = signature
        self.retriever = retriever
        self.seed = seed
        self.op_family = op_family
        self.arch = arch
        self.dtype = dtype
        self._kernels: list[LoadedKernel] | None = None
        self._designs: dict[tuple[str, str, str | None], tuple[list[LoadedKernel], list[str]]] = {}

    # ------------------------------------------------------------ public
    def propose(self, ctx: ProposalContext) -> ProposalBatch:
        """Return up to ``ctx.n`` new candidates (an empty batch when nothing is left to try)."""
        family, notes = self._family(ctx)
        designs, skipped = self.designs(family, ctx.dsl, self.arch or ctx.arch)
        if not ctx.history:
            ids = ", ".join(k.meta.id for k in designs) or "none"
            notes += [f"designs of family '{family}', best-ranked first: {ids}", *skipped]
        if not ctx.performance_measured:
            notes.append("performance is not measured: designs rank by correctness and retrieval")
        stats = self._stats(ctx, designs)
        rng = random.Random(int(sha256(f"{self.seed}|{ctx.seed}|{ctx.round}")[:16], 16))
        forbidden, seen = set(ctx.forbidden_families), set(ctx.tried_sources)
        proposals: list[Proposal] = []
        for choice in self._choices(designs, stats, ctx.performance_measured, rng):
            kid = choice.kernel.meta.id
            if kid in forbidden or _config_key(choice.params) in stats[kid].tried:
                continue
            try:
                source = adapt_kernel(
                    choice.kernel.path, choice.kernel.meta, self.signature, params=choice.params
                )
            except AdaptError as err:  # a config the adapter refuses: skip it, keep searching
                logger.debug("skipping %s %s: %s", kid, choice.params, err)
                continue
            sha = sha256(source)
            if sha in seen:
                continue
            seen.add(sha)
            proposals.append(
                Proposal(
                    source=source,
                    family=kid,
                    origin=f"search:{kid}",
                    params=choice.params,
                    rationale=choice.rationale,
                )
            )
            if len(proposals) >= ctx.n:
                break
        if not proposals:
            notes.append(
                "nothing left to try: every adaptable design and tuning config was tried"
                + (f" or is forbidden ({', '.join(sorted(forbidden))})" if forbidden else "")
            )
        return ProposalBatch(proposals=proposals, notes=notes)

    def designs(
        self, family: str, dsl: str = "triton", arch: str | None = None
    ) -> tuple[list[LoadedKernel], list[str]]:
        """Return the family's kernels that adapt to the problem (best first) and why others don't.

        Cached per (family, dsl, arch): the signature does not change during a run.
        """
        key = (family, dsl, arch)
        if key not in self._designs:
            self._designs[key] = self._find_designs(family, dsl, arch)
        return self._designs[key]

    # ------------------------------------------------------------ designs
    def _family(self, ctx: ProposalContext) -> tuple[str, list[str]]:
        if self.op_family or ctx.op_family:
            family = str(self.op_family or ctx.op_family)
            return family, ([f"op family '{family}' from the spec"] if not ctx.history else [])
        families = {k.meta.id: k.meta.op_family.value for k in self._all_kernels()}
        family, evidence = infer_op_family(ctx.reference_source, self.retriever, families=families)
        return family, [f"op family inferred: {evidence}"]

    def _all_kernels(self) -> list[LoadedKernel]:
        if self._kernels is None:
            self._kernels, problems = load_kernels(self.kernels_root)
            for problem in problems:
                logger.warning("reference kernel skipped: %s", problem)
        return self._kernels

    def _find_designs(
        self, family: str, dsl: str, arch: str | None
    ) -> tuple[list[LoadedKernel], list[str]]:
        designs, skipped = [], []
        for kernel in self._all_kernels():
            meta = kernel.meta
            if meta.op_family.value != family or meta.dsl.value != dsl:
                continue
            if arch and arch not in {a.value for a in meta.arch} | {"any"}:
                skipped.append(
                    f"{meta.id}: declared for {[a.value for a in meta.arch]}, not {arch}"
                )
                continue
            if self.dtype and self.dtype not in {d.value for d in meta.dtypes}:
                skipped.append(f"{meta.id}: no {self.dtype} in its dtypes")
                continue
            try:
                source = adapt_kernel(
                    kernel.path, meta, self.signature, params=_default_config(kernel)
                )
            except AdaptError as err:
                skipped.append(f"skipped {err.message}")
                continue
            report = screen_source(source)
            if not report.passed:
                finding = report.findings[0]
                skipped.append(
                    f"{meta.id}: the scorer's screen would reject it ({finding.message})"
                )
                continue
            designs.append(kernel)
        return self._rank(designs, family), skipped

    def _rank(self, designs: list[LoadedKernel], family: str) -> list[LoadedKernel]:
        """Retrieval order when a retriever is given (unretrieved designs last), else lexical."""
        sig = self.signature
        query_words = _words(f"{sig.problem_name} {family}")

        def lexical(kernel: LoadedKernel) -> tuple[int, str]:
            words = _words(f"{kernel.meta.id} {kernel.meta.title}")
            return (-len(query_words & words), kernel.meta.id)

        order = sorted(designs, key=lexical)
        if self.retriever is None:
            return order
        query = f"{sig.problem_name} {family} kernel"
        hits = self.retriever.search(query, k=64, filters=KBFilter(op_family=family, kind="kernel"))
        position = {hit.id: i for i, hit in enumerate(hits)}
        return sorted(order, key=lambda k: position.get(k.meta.id, len(position)))

    # ------------------------------------------------------------ search
    @staticmethod
    def _stats(ctx: ProposalContext, designs: list[LoadedKernel]) -> dict[str, _Stats]:
        stats = {k.meta.id: _Stats() for k in designs}
        defaults = {k.meta.id: _config_key(_default_config(k)) for k in designs}
        for record in ctx.history:
            kid = record.origin.removeprefix("search:")
            if kid not in stats or not record.origin.startswith("search:"):
                continue
            s, key = stats[kid], _config_key(record.params)
            s.tried.add(key)
            if record.correct:
                s.accepted.append(record)
            else:
                s.failed += 1
            if key != defaults[kid]:
                s.refined_rounds.add(record.round)
        return stats

    def _choices(
        self,
        designs: list[LoadedKernel],
        stats: dict[str, _Stats],
        measured: bool,
        rng: random.Random,
    ) -> Iterator[_Choice]:
        """Candidates in priority order; the caller skips tried, forbidden and duplicate ones."""
        for rank, kernel in enumerate(designs, 1):
            if not stats[kernel.meta.id].tried:
                yield _Choice(
                    kernel, _default_config(kernel), f"design #{rank}: first try, default tuning"
                )
        alive = [k for k in designs if stats[k.meta.id].accepted]
        if measured:  # best score first; retrieval order breaks ties
            alive.sort(key=lambda k: -stats[k.meta.id].best_score())
        halvings = len(set().union(*(stats[k.meta.id].refined_rounds for k in alive)))
        keep = alive[: max(1, math.ceil(len(alive) / 2**halvings))]
        yield from self._round_robin(keep, stats, measured, rng, "refine")
        yield from self._round_robin(alive[len(keep) :], stats, measured, rng, "revisit")
        failed = [k for k in designs if stats[k.meta.id].tried and not stats[k.meta.id].accepted]
        retries = [_retries(k, stats[k.meta.id], rng) for k in failed]
        for batch in itertools.zip_longest(*retries):  # each failed design's next retry in turn
            yield from (c for c in batch if c is not None)

    @staticmethod
    def _round_robin(
        kernels: list[LoadedKernel],
        stats: dict[str, _Stats],
        measured: bool,
        rng: random.Random,
        why: str,
    ) -> Iterator[_Choice]:
        streams = [_refinements(k, stats[k.meta.id], measured, rng, why) for k in kernels]
        for batch in itertools.zip_longest(*streams):
            yield from (c for c in batch if c is not None)
