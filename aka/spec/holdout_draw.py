"""How generated holdout shapes are drawn: the sampler behind ``aka.spec.holdout``.

Owns the mutable draft of a shape, the varying dims (a kwarg, a list element, a list's length or
its elements) with their repair into the rules, the six categories, and the retry loop with the
memory cap. ``aka.spec.holdout`` holds the rules (pydantic models) and the public functions.
Pure data: reads no problem code and imports no torch.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from aka.core.errors import SpecError
from aka.spec.expr import evaluate_quantity
from aka.spec.vocab import Split

if TYPE_CHECKING:
    from aka.spec.holdout import Category, DimRule, HoldoutSpec
    from aka.spec.problem import ProblemSpec

__all__ = [
    "DRAW",
    "KEY",
    "Context",
    "Dim",
    "Draft",
    "assign",
    "case_key",
    "copy_draft",
    "dims_of",
    "draw",
    "make_context",
    "read",
    "rng_for",
    "size_text",
    "split_key",
    "where_of",
]

TRIES = 300  # draws per shape before a category gives up
_BLOCKS = tuple(2**i for i in range(4, 14))  # 16 .. 8192: the boundaries "edge" steps off
#: A dims key: a kwarg name, or one element of a list kwarg (``shape[0]``, ``shape[-1]``).
KEY = re.compile(r"^(?P<name>[A-Za-z_]\w*)(?:\[(?P<index>-?\d+)\])?$")


def split_key(key: str) -> tuple[str, int | None]:
    """``"shape[-1]"`` -> ("shape", -1); ``"tokens"`` -> ("tokens", None)."""
    match = KEY.match(key)
    if match is None:
        return key, None
    index = match["index"]
    return match["name"], None if index is None else int(index)


# --- a shape being drawn ---------------------------------------------------------------------


@dataclass
class Draft:
    """Mutable kwargs of a shape; ``where`` says whether a name goes to init, input or both."""

    init: dict[str, Any]
    inputs: dict[str, Any]
    where: Mapping[str, tuple[bool, bool]]

    def names(self) -> dict[str, Any]:
        """Init and input kwargs together (input wins), for expressions."""
        return {**self.init, **self.inputs}

    def get(self, name: str) -> Any:
        """The kwarg's value (input kwargs first)."""
        return self.inputs[name] if name in self.inputs else self.init[name]

    def set(self, name: str, value: Any) -> None:
        """Set the kwarg where the problem's shapes keep it: init, input or both."""
        in_init, in_input = self.where.get(name, (False, True))
        if in_init:
            self.init[name] = copy.deepcopy(value)
        if in_input:
            self.inputs[name] = copy.deepcopy(value)

    def key(self) -> str:
        """A canonical text of the kwargs, to compare shapes."""
        return case_key(self.init, self.inputs)


def case_key(init: Mapping[str, Any], inputs: Mapping[str, Any]) -> str:
    """A canonical text of a shape's kwargs, to compare shapes."""
    return json.dumps([init, inputs], sort_keys=True)


@dataclass(frozen=True)
class Dim:
    """One varying integer: a kwarg, a list element, a list's length or all its elements."""

    key: str
    rule: DimRule
    name: str
    kind: Literal["scalar", "item", "length", "elements"]
    index: int = 0

    @property
    def scalable(self) -> bool:
        """Batch and seq dims scale; the others keep their meaning."""
        return self.rule.role in ("batch", "seq")

    def get(self, d: Draft) -> int:
        """The value (the largest element for a list's elements)."""
        value = d.get(self.name)
        if self.kind == "scalar":
            return int(value)
        if self.kind == "item":
            return int(value[self.index])
        if self.kind == "length":
            return len(value)
        return max(int(v) for v in value)

    def set(self, d: Draft, value: int) -> None:
        """Set the value (every element; a length repeats the elements in turn)."""
        if self.kind == "scalar":
            d.set(self.name, int(value))
            return
        items = list(d.get(self.name))
        if self.kind == "item":
            items[self.index] = int(value)
        elif self.kind == "length":
            n = max(1, int(value))
            items = [items[i % len(items)] for i in range(n)] if items else [1] * n
        else:
            items = [int(value)] * len(items)
        d.set(self.name, items)

    def scale(self, d: Draft, factor: float, rnd: Callable[[float], float] = round) -> None:
        """Multiply the value (each element) by ``factor``, rounded by ``rnd``, at least 1."""
        if self.kind == "elements":
            d.set(self.name, [max(1, int(rnd(int(v) * factor))) for v in d.get(self.name)])
        else:
            self.set(d, max(1, int(rnd(self.get(d) * factor))))

    def bounds(self, d: Draft) -> tuple[int, int | None, int, list[int] | None]:
        """(min, max, multiple_of, choices) evaluated on the draft's current kwargs."""
        names = d.names()
        low = math.ceil(evaluate_quantity(self.rule.min, names))
        high = (
            None if self.rule.max is None else math.floor(evaluate_quantity(self.rule.max, names))
        )
        step = (
            1
            if self.rule.multiple_of is None
            else int(evaluate_quantity(self.rule.multiple_of, names))
        )
        return low, high, max(1, step), self.rule.choices

    def repair(self, d: Draft) -> None:
        """Move the value(s) to the nearest allowed ones."""
        low, high, step, choices = self.bounds(d)

        def fix(v: int) -> int:
            if choices:
                return min(choices, key=lambda c: (abs(c - v), c))
            v = max(v, low) if high is None else min(max(v, low), high)
            v = max(step, round(v / step) * step)
            if high is not None and v > high:
                v -= step
            return v + step if v < low else v

        if self.kind == "elements":
            d.set(self.name, [fix(int(v)) for v in d.get(self.name)])
        else:
            self.set(d, fix(self.get(d)))

    def violations(self, d: Draft) -> list[str]:
        """How the value(s) break the rule."""
        low, high, step, choices = self.bounds(d)
        values = [int(v) for v in d.get(self.name)] if self.kind == "elements" else [self.get(d)]
        bad = []
        for v in values:
            if choices and v not in choices:
                bad.append(f"{self.key}={v} is not one of {choices}")
            elif v < low or (high is not None and v > high):
                bad.append(f"{self.key}={v} is outside [{low}, {high}]")
            elif v % step:
                bad.append(f"{self.key}={v} is not a multiple of {step}")
        return bad


def dims_of(spec: HoldoutSpec) -> list[Dim]:
    """The varying dims of the rules, in order (a list rule gives its length, then elements)."""
    dims: list[Dim] = []
    for key, rule in spec.dims.items():
        name, index = split_key(key)
        kind: Literal["scalar", "item"] = "scalar" if index is None else "item"
        dims.append(Dim(key, rule, name, kind, index or 0))
    for name, lst in spec.lists.items():
        dims.append(Dim(f"len({name})", lst.length, name, "length"))
        dims.append(Dim(f"{name}[*]", lst.element, name, "elements"))
    return dims


# --- the generator -----------------------------------------------------------------------------


@dataclass
class Context:
    """One problem's rules, dims, base shapes and memory cap while its shapes are drawn."""

    problem: ProblemSpec
    spec: HoldoutSpec
    dims: list[Dim]
    bases: list[Draft]
    tune_max: dict[str, int]
    cap: float

    def finish(self, d: Draft) -> Draft:
        """Repair every dim in order, then set derived and tied kwargs."""
        for dim in self.dims:
            dim.repair(d)
        for name, expr in self.spec.derived.items():
            value = evaluate_quantity(expr, d.names())
            d.set(name, int(value) if value.is_integer() else value)
        for name in self.spec.tied:
            d.init[name] = d.inputs[name] = copy.deepcopy(d.get(name))
        return d

    def violations(self, d: Draft) -> list[str]:
        """How the draft breaks the dims, derived or tied rules (empty: it keeps them)."""
        bad = [v for dim in self.dims for v in dim.violations(d)]
        names = d.names()
        for name, expr in self.spec.derived.items():
            if name in names and names[name] != evaluate_quantity(expr, names):
                bad.append(f"{name}={names[name]!r} is not {expr}")
        for name in self.spec.tied:  # a kwarg left to its default in one place is not compared
            if name in d.init and name in d.inputs and d.init[name] != d.inputs[name]:
                bad.append(f"{name}: init {d.init.get(name)!r} != input {d.inputs.get(name)!r}")
        return bad

    def fits(self, d: Draft) -> bool:
        """Whether inputs + outputs fit the memory cap."""
        return self.spec.memory.total(d.names()) <= self.cap

    def shrink(self, d: Draft) -> bool:
        """Halve the largest batch/seq dim until the shape fits the memory cap."""
        for _ in range(64):
            if self.fits(d):
                return True
            big = [x for x in self.dims if x.scalable and x.get(d) > max(1, x.bounds(d)[0])]
            if not big:
                return False
            max(big, key=lambda x: x.get(d)).scale(d, 0.5)
            self.finish(d)
        return self.fits(d)


def where_of(problem: ProblemSpec) -> dict[str, tuple[bool, bool]]:
    """Kwarg -> (in some shape's init_kwargs, in some shape's input_kwargs)."""
    init = {k for s in problem.shapes for k in s.init_kwargs}
    inputs = {k for s in problem.shapes for k in s.input_kwargs}
    return {k: (k in init, k in inputs) for k in init | inputs}


def make_context(problem: ProblemSpec, spec: HoldoutSpec, cap: float) -> Context:
    """The drawing context; the bases are the tune shapes that have every varying kwarg.

    Raises:
        SpecError: No tune shape has them all.
    """
    where = where_of(problem)
    dims = dims_of(spec)
    bases = []
    for shape in problem.shapes_in({Split.TUNE}):
        d = Draft(copy.deepcopy(shape.init_kwargs), copy.deepcopy(shape.input_kwargs), where)
        if all(dim.name in d.names() for dim in dims):
            bases.append(d)
    if not bases:
        raise SpecError(
            f"{problem.name}: no tune shape has every kwarg the holdout rules vary; "
            "add a tune shape or fix the rules",
            file=problem.source_path,
            field="holdout",
        )
    tune_max = {dim.key: max(dim.get(b) for b in bases) for dim in dims}
    return Context(problem, spec, dims, bases, tune_max, cap)


def copy_draft(d: Draft) -> Draft:
    """A deep copy."""
    return Draft(copy.deepcopy(d.init), copy.deepcopy(d.inputs), d.where)


def _prime_at_least(n: int) -> int:
    n = max(2, n)
    while any(n % p == 0 for p in range(2, math.isqrt(n) + 1)):
        n += 1
    return n


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    low, high = max(1, low), max(1, low, high)
    return round(math.exp(rng.uniform(math.log(low), math.log(high))))


# Each category returns a finished draft with its property, shrunk to the cap where shrinking
# keeps the property, or None (draw again).


def _edge(rng: random.Random, base: Draft, ctx: Context) -> Draft | None:
    """Every batch dim at 1, or one batch/seq/feature dim one off a block size."""
    d = copy_draft(base)
    batch = [x for x in ctx.dims if x.rule.role == "batch" and x.get(d) > max(1, x.bounds(d)[0])]
    if batch and rng.random() < 0.5:
        for x in batch:
            x.set(d, 1)
        ctx.finish(d)
        return d if ctx.shrink(d) else None
    free = [
        x
        for x in ctx.dims
        if x.rule.role in ("batch", "seq", "feature") and not x.rule.choices and x.bounds(d)[2] == 1
    ]
    if not free:
        return None
    x = rng.choice(free)
    low, high, _, _ = x.bounds(d)
    value = x.get(d)
    near = [b for b in _BLOCKS if b - 1 >= low and (high is None or b + 1 <= high)]
    close = [b for b in near if value / 8 <= b <= value * 8] or near
    if not close:
        return None
    x.set(d, rng.choice(close) + rng.choice((-1, 1)))
    return ctx.finish(d)  # not shrunk: that would move the value off the boundary


def _scaleup(rng: random.Random, base: Draft, ctx: Context) -> Draft | None:
    """One batch/seq dim times 2-4 (never shrunk: another base is drawn instead)."""
    d = copy_draft(base)
    scalable = [x for x in ctx.dims if x.scalable]
    if not scalable:
        return None
    x = rng.choice(scalable)
    before = x.get(d)
    x.scale(d, rng.uniform(2.0, 4.0), math.ceil)
    ctx.finish(d)
    return d if x.get(d) >= 2 * before and ctx.fits(d) else None


def _scaledown(rng: random.Random, base: Draft, ctx: Context) -> Draft | None:
    """Shrink a batch/seq dim 2-8x; where all are at their minimum, a width or a count."""
    d = copy_draft(base)
    big = [x for x in ctx.dims if x.scalable and x.get(d) >= 2 * max(1, x.bounds(d)[0])]
    if not big:
        big = [
            x
            for x in ctx.dims
            if x.rule.role in ("feature", "count") and x.get(d) >= 2 * max(1, _smallest(x, d))
        ]
    if not big:
        return None
    x = rng.choice(big)
    before = x.get(d)
    x.scale(d, 1.0 / rng.uniform(2.0, 8.0), math.floor)
    if x.rule.choices:  # the largest allowed value at most the shrunk one
        x.set(d, max((c for c in x.rule.choices if c <= x.get(d)), default=min(x.rule.choices)))
    ctx.finish(d)
    return d if 2 * x.get(d) <= before and ctx.shrink(d) else None


def _unaligned(target: int, step: int, prime: bool) -> int:
    """A value near ``target``: a prime (step 1), else an odd multiple of ``step``."""
    if step == 1:
        return _prime_at_least(target) if prime else max(1, target) | 1
    k = max(1, round(target / step))
    for _ in range(64):
        if (k * step) % 32:
            return k * step
        k += 1
    return k * step


def _alignment(rng: random.Random, base: Draft, ctx: Context) -> Draft | None:
    """Batch/seq sizes to primes (odd multiples), some widths to unaligned values."""
    d = copy_draft(base)
    for x in ctx.dims:
        if x.rule.role in ("count", "block"):
            continue
        _, _, step, choices = x.bounds(d)
        if choices:
            odd = [c for c in choices if c % 32]
            if odd and x.rule.role == "feature":
                x.set(d, rng.choice(odd))
            continue
        if x.rule.role == "feature" and rng.random() < 0.5:
            continue  # bend some widths, keep others
        prime = x.scalable or rng.random() < 0.5
        if x.kind == "elements":
            values = [
                _unaligned(round(int(v) * rng.uniform(0.5, 1.5)), step, prime)
                for v in d.get(x.name)
            ]
            d.set(x.name, values)
        elif x.get(d) > 1:
            x.set(d, _unaligned(round(x.get(d) * rng.uniform(0.5, 1.5)), step, prime))
    ctx.finish(d)
    if not ctx.shrink(d):
        return None
    values = [v for x in ctx.dims if x.rule.role != "block" for v in _values(x, d)]
    return d if any(v % 32 and v > 1 for v in values) else None


def _values(x: Dim, d: Draft) -> list[int]:
    return [int(v) for v in d.get(x.name)] if x.kind == "elements" else [x.get(d)]


def _smallest(x: Dim, d: Draft) -> int:
    low, _, step, choices = x.bounds(d)
    return min(choices) if choices else max(step, math.ceil(low / step) * step)


def _aspect(rng: random.Random, base: Draft, ctx: Context) -> Draft | None:
    """One batch/seq dim very long and the widths at their smallest, or the reverse."""
    d = copy_draft(base)
    scalable = [x for x in ctx.dims if x.scalable]
    widths = [x for x in ctx.dims if x.rule.role == "feature"] or [
        x for x in ctx.dims if x.rule.role == "count"
    ]
    if not widths and not scalable:
        return None
    if widths and (not scalable or rng.random() < 0.5):  # wide: a few rows, one wide dim
        long, short = rng.choice(widths), scalable
    else:  # tall: one very long batch/seq dim, everything else at its smallest
        long = rng.choice(scalable)
        short = widths or [x for x in scalable if x is not long]
    for x in short:
        x.set(d, _smallest(x, d) + (rng.randrange(4) if x.scalable else 0))
    _, high, _, choices = long.bounds(d)
    if choices:
        long.set(d, max(choices))
    else:
        target = long.get(d) * rng.uniform(8.0, 32.0)
        if long.scalable:  # tall means thousands of rows at least
            target = max(target, 1024 * rng.uniform(1.0, 4.0))
        long.set(d, int(target if high is None else min(target, high)))
    ctx.finish(d)
    return d if ctx.shrink(d) else None


def _realistic(rng: random.Random, base: Draft, ctx: Context) -> Draft | None:
    """A real model's entry; batch/seq up to the tune range (or 1024), blocks from choices."""
    d = copy_draft(base)
    entry = rng.choice(ctx.spec.realistic)
    for x in ctx.dims:
        if x.scalable and rng.random() < 0.5:  # up to the tune range, or 1024 if that is tiny
            x.set(d, _log_uniform(rng, x.bounds(d)[0], max(ctx.tune_max[x.key], 1024)))
        elif x.rule.role == "block" and x.rule.choices and rng.random() < 0.5:
            x.set(d, rng.choice(x.rule.choices))  # engines pick block sizes per model
    for key, value in entry.items():
        assign(d, key, value)
    ctx.finish(d)
    ok = ctx.shrink(d) and all(read(d, key) == value for key, value in entry.items())
    return d if ok else None


def assign(d: Draft, key: str, value: Any) -> None:
    """Set a kwarg or a list element (a dims or realistic key)."""
    name, index = split_key(key)
    if index is None:
        d.set(name, value)
    else:
        items = list(d.get(name))
        items[index] = value
        d.set(name, items)


def read(d: Draft, key: str) -> Any:
    """Read a kwarg or a list element (a dims or realistic key)."""
    name, index = split_key(key)
    return d.get(name) if index is None else d.get(name)[index]


DRAW: dict[Category, Callable[[random.Random, Draft, Context], Draft | None]] = {
    "edge": _edge,
    "scaleup": _scaleup,
    "scaledown": _scaledown,
    "alignment": _alignment,
    "aspect": _aspect,
    "realistic": _realistic,
}


def rng_for(seed: int, problem: str, salt: str) -> random.Random:
    """A random stream of its own for (seed, problem, salt)."""
    digest = hashlib.sha256(f"{seed}:{problem}:{salt}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def draw(category: Category, rng: random.Random, ctx: Context, seen: set[str]) -> Draft:
    """Draw one valid, new shape of ``category`` that fits the cap.

    Raises:
        SpecError: None found in ``TRIES`` draws (names the operator and the category).
    """
    for _ in range(TRIES):
        d = DRAW[category](rng, rng.choice(ctx.bases), ctx)
        if d is None or d.key() in seen or ctx.violations(d) or not ctx.fits(d):
            continue
        return d
    raise SpecError(
        f"{ctx.problem.name}: cannot draw a valid '{category}' holdout shape within the memory "
        f"cap of {size_text(ctx.cap)} after {TRIES} tries; raise "
        "bench.holdout_memory_cap_gb or widen the holdout rules",
        file=ctx.problem.source_path,
        field="holdout",
    )


def size_text(n: float) -> str:
    """Bytes in words: 16 GiB, 256 KiB, 100 bytes."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} bytes"
