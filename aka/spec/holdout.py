"""Generated holdout shapes (issue #6): an operator's rules, and the seeded generator.

Owns the op.yaml ``holdout:`` rules (which kwargs may vary and within what limits, kwargs tied or
derived from others, shapes of real models, a memory expression and a phase rule) and the
generator that draws holdout shapes from a problem's tune shapes in six categories: ``edge``
(batch 1, a size one off a block boundary), ``scaleup`` (2-4x), ``scaledown``, ``alignment``
(primes, non-multiples of 32/64/128), ``aspect`` (extreme aspect ratio) and ``realistic`` (real
model configurations). The seed is the user's, never in a repository, so the agent, which sees
only tune shapes, cannot know them. The sampler itself lives in ``aka.spec.holdout_draw``. Pure
data: reads no problem code and imports no torch.
"""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from aka.core.errors import ConfigError, SpecError
from aka.spec.expr import evaluate_quantity
from aka.spec.holdout_draw import (
    KEY,
    Context,
    Draft,
    case_key,
    dims_of,
    draw,
    make_context,
    rng_for,
    split_key,
    where_of,
)
from aka.spec.vocab import Phase, Split

if TYPE_CHECKING:
    from aka.core.config import BenchConfig
    from aka.spec.problem import ProblemSpec, ShapeCase

__all__ = [
    "CATEGORIES",
    "DimRule",
    "HoldoutSpec",
    "ListRule",
    "MemoryRule",
    "PhaseRule",
    "generate_holdout",
    "holdout_rule_errors",
    "holdout_seed",
    "holdout_violations",
    "with_holdout",
]

#: A number, or an arithmetic expression over the shape's kwargs (``aka.spec.expr``).
Quantity = Annotated[float | int | str, Field(union_mode="left_to_right")]
#: batch: independent items (tokens, rows, sequences); seq: a length inside an item; feature: a
#: row's width (hidden size, head dim); count: heads, experts, top-k, state slots; block: a
#: block, group or chunk size. Categories scale batch/seq, bend features, keep blocks.
DimRole = Literal["batch", "seq", "feature", "count", "block"]
Category = Literal["edge", "scaleup", "scaledown", "alignment", "aspect", "realistic"]
CATEGORIES: tuple[Category, ...] = (
    "edge",
    "scaleup",
    "scaledown",
    "alignment",
    "aspect",
    "realistic",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DimRule(_Strict):
    """How one integer kwarg (or one element of a list kwarg) may vary."""

    role: DimRole = Field(description="batch, seq, feature, count or block.")
    min: Quantity = Field(default=1, description="Smallest value (may name earlier dims).")
    max: Quantity | None = Field(default=None, description="Largest value; None: unbounded.")
    multiple_of: Quantity | None = Field(default=None, description="Values are multiples.")
    choices: list[int] | None = Field(
        default=None, min_length=1, description="The only values allowed (e.g. head dims)."
    )


class ListRule(_Strict):
    """A list kwarg of per-item sizes (``seq_lens``): its length and its elements."""

    length: DimRule = Field(description="How many elements (usually role batch).")
    element: DimRule = Field(description="Each element (usually role seq).")


class PhaseRule(_Strict):
    """The data form of a reference's ``phase_of``: a constant, or a threshold."""

    constant: Phase | None = Field(default=None, description="Every shape has this phase.")
    of: Quantity | None = Field(
        default=None, description="Expression compared with decode_at_most (e.g. token_count)."
    )
    decode_at_most: float | None = Field(
        default=None, description="'of' at most this: decode, else prefill."
    )

    @model_validator(mode="after")
    def _one_form(self) -> PhaseRule:
        threshold = self.of is not None and self.decode_at_most is not None
        if (self.constant is not None) == threshold or (
            self.constant is not None and (self.of is not None or self.decode_at_most is not None)
        ):
            raise ValueError("give either 'constant' or both 'of' and 'decode_at_most'")
        return self

    def phase(self, names: Mapping[str, object]) -> Phase:
        """The phase of a shape with these kwargs."""
        if self.constant is not None:
            return self.constant
        value = evaluate_quantity(self.of or 0, names)
        return Phase.DECODE if value <= (self.decode_at_most or 0) else Phase.PREFILL


class MemoryRule(_Strict):
    """Bytes of a shape's inputs and outputs, as expressions over its kwargs."""

    inputs: Quantity = Field(description="Bytes of the tensors _make_inputs returns.")
    outputs: Quantity = Field(default=0, description="Bytes of the outputs forward returns.")

    def total(self, names: Mapping[str, object]) -> float:
        """Inputs + outputs, in bytes."""
        return evaluate_quantity(self.inputs, names) + evaluate_quantity(self.outputs, names)


class HoldoutSpec(_Strict):
    """op.yaml ``holdout:``: how generated holdout shapes may differ from the tune shapes."""

    dims: dict[str, DimRule] = Field(
        default_factory=dict,
        description="kwarg (or list element, 'shape[0]') -> rule, in the order rules are applied.",
    )
    lists: dict[str, ListRule] = Field(
        default_factory=dict, description="List kwarg of per-item sizes -> length/element rules."
    )
    tied: list[str] = Field(
        default_factory=list, description="Kwargs in init_kwargs and input_kwargs kept equal."
    )
    derived: dict[str, Quantity] = Field(
        default_factory=dict, description="kwarg -> expression it always equals (len(seq_lens))."
    )
    realistic: list[dict[str, JsonValue]] = Field(
        min_length=1, description="Partial kwargs of real model configurations (name the model)."
    )
    memory: MemoryRule
    phase_rule: PhaseRule

    @model_validator(mode="after")
    def _keys(self) -> HoldoutSpec:
        bad = [k for k in self.dims if not KEY.match(k)]
        if bad:
            raise ValueError(f"dims keys {bad} must be a kwarg name or name[index]")
        if not self.dims and not self.lists:
            raise ValueError("give at least one rule in 'dims' or 'lists'")
        return self

    def names(self) -> dict[str, str]:
        """Every kwarg the rules name -> the field naming it (for error messages)."""
        found: dict[str, str] = {}
        for key in self.dims:
            found.setdefault(split_key(key)[0], f"holdout.dims.{key}")
        for group, keys in (
            ("lists", self.lists),
            ("tied", self.tied),
            ("derived", self.derived),
        ):
            for key in keys:
                found.setdefault(key, f"holdout.{group}.{key}")
        for i, entry in enumerate(self.realistic):
            for key in entry:
                found.setdefault(split_key(key)[0], f"holdout.realistic[{i}].{key}")
        return found


def generate_holdout(
    problem: ProblemSpec, seed: int, *, count: int = 8, memory_cap_bytes: float
) -> list[ShapeCase]:
    """Draw ``count`` holdout shapes from the problem's tune shapes and its holdout rules.

    Deterministic given (problem, seed); operators differ because the problem's name is hashed
    in. The first six shapes are one per category (in ``CATEGORIES`` order), the rest of
    categories drawn from the seed; shape i is drawn from its own stream, so raising ``count``
    keeps the earlier shapes. Every shape satisfies the rules, differs from every shape already in
    the problem, fits ``memory_cap_bytes`` and gets its phase from the phase rule.

    Raises:
        SpecError: The problem has no holdout rules, or a category yields no valid shape.
        ValueError: ``count`` is below 6.
    """
    from aka.spec.problem import ShapeCase

    if count < len(CATEGORIES):
        raise ValueError(f"count={count}: need at least {len(CATEGORIES)}, one per category")
    spec = problem.holdout
    if spec is None:
        raise SpecError(
            f"{problem.name} has no holdout rules; add a 'holdout:' section (docs/suites.md)",
            file=problem.source_path,
            field="holdout",
        )
    ctx = make_context(problem, spec, memory_cap_bytes)
    picker = rng_for(seed, problem.name, "categories")
    categories = list(CATEGORIES) + [picker.choice(CATEGORIES) for _ in range(count - 6)]
    seen = {case_key(s.init_kwargs, s.input_kwargs) for s in problem.shapes}
    cases = []
    for i, category in enumerate(categories):
        d = draw(category, rng_for(seed, problem.name, str(i)), ctx, seen)
        seen.add(d.key())
        cases.append(
            ShapeCase(
                id=f"holdout_{category}_{i}",
                init_kwargs=d.init,
                input_kwargs=d.inputs,
                phase=spec.phase_rule.phase(d.names()),
                split=Split.HOLDOUT,
            )
        )
    return cases


def with_holdout(
    problem: ProblemSpec, seed: int, *, count: int = 8, memory_cap_bytes: float
) -> ProblemSpec:
    """The problem with generated holdout shapes appended (a problem without rules: unchanged).

    Raises:
        SpecError: As ``generate_holdout``, or a generated id is already taken.
    """
    if problem.holdout is None:
        return problem
    cases = generate_holdout(problem, seed, count=count, memory_cap_bytes=memory_cap_bytes)
    taken = {s.id for s in problem.shapes} & {c.id for c in cases}
    if taken:
        raise SpecError(
            f"shape ids {sorted(taken)} are reserved for generated holdout shapes; rename them",
            file=problem.source_path,
            field="shapes",
        )
    return problem.model_copy(update={"shapes": [*problem.shapes, *cases]})


def holdout_violations(problem: ProblemSpec, case: ShapeCase) -> list[str]:
    """How ``case`` breaks the problem's holdout rules (empty: it keeps them all)."""
    if problem.holdout is None:
        return []
    d = Draft(dict(case.init_kwargs), dict(case.input_kwargs), where_of(problem))
    ctx = Context(problem, problem.holdout, dims_of(problem.holdout), [d], {}, math.inf)
    return ctx.violations(d)


def holdout_rule_errors(problem: ProblemSpec) -> list[str]:
    """Check the holdout rules against the problem's own shapes, without running anything.

    Every kwarg a rule names must exist in the shapes (tied ones in init and input kwargs), list
    rules must name lists, and the expressions must evaluate on every tune shape, where the phase
    rule must also give the phase the shape declares.
    """
    spec = problem.holdout
    if spec is None:
        return []
    where = where_of(problem)
    known = sorted(where)
    errors = [
        f"{field}: no shape has a kwarg {name!r} (the shapes' kwargs: {known}); "
        "name one of them or remove the rule"
        for name, field in spec.names().items()
        if name not in where
    ]
    errors += [
        f"holdout.tied.{name}: a tied kwarg must appear in init_kwargs and input_kwargs; "
        "remove it from 'tied' or add it to both"
        for name in spec.tied
        if name in where and where[name] != (True, True)
    ]
    if errors:
        return errors
    exprs: list[tuple[str, float | int | str | None]] = [
        ("holdout.memory.inputs", spec.memory.inputs),
        ("holdout.memory.outputs", spec.memory.outputs),
        ("holdout.phase_rule.of", spec.phase_rule.of),
        *((f"holdout.derived.{k}", v) for k, v in spec.derived.items()),
    ]
    rules = [(f"holdout.dims.{k}", r) for k, r in spec.dims.items()]
    for k, lst in spec.lists.items():
        rules += [
            (f"holdout.lists.{k}.length", lst.length),
            (f"holdout.lists.{k}.element", lst.element),
        ]
    for field, rule in rules:
        exprs += [(f"{field}.{f}", getattr(rule, f)) for f in ("min", "max", "multiple_of")]
    for shape in problem.shapes_in({Split.TUNE}):
        names = {**shape.init_kwargs, **shape.input_kwargs}
        shape_errors = _list_errors(spec, shape.id, names)
        for field, expr in exprs:
            if expr is None:
                continue
            try:
                evaluate_quantity(expr, names)
            except ValueError as err:
                shape_errors.append(f"{field} on shape {shape.id!r}: {err}")
        if not shape_errors and shape.phase is not None:
            got = spec.phase_rule.phase(names)
            if got is not shape.phase:
                shape_errors.append(
                    f"holdout.phase_rule gives {got.value!r} for shape {shape.id!r}, which says "
                    f"{shape.phase.value!r}; make the rule match the reference's phase_of"
                )
        errors += shape_errors
    return errors


def _list_errors(spec: HoldoutSpec, shape_id: str, names: Mapping[str, Any]) -> list[str]:
    """List rules and ``name[i]`` dims must meet lists long enough on a shape."""
    errors = []
    for key in [*spec.dims, *spec.lists]:
        name, index = split_key(key)
        value, field = names.get(name), f"holdout.{'lists' if key in spec.lists else 'dims'}.{key}"
        if name not in names or (index is None and key not in spec.lists):
            continue
        if not isinstance(value, list):
            errors.append(f"{field}: {name}={value!r:.40} on shape {shape_id!r} is not a list")
        elif index is not None and not -len(value) <= index < len(value):
            errors.append(f"{field}: {name} on shape {shape_id!r} has {len(value)} elements")
    return errors


def holdout_seed(bench: BenchConfig, cache_dir: Path) -> int:
    """The user's holdout seed: ``bench.holdout_seed``, else one made once in ``cache_dir``.

    The file ``cache_dir/holdout_seed`` is created with a random 63-bit seed and mode 0o600; the
    seed is the user's, never in a repository.

    Raises:
        ConfigError: The seed file exists but does not hold an integer.
    """
    if bench.holdout_seed is not None:
        return bench.holdout_seed
    path = cache_dir / "holdout_seed"
    cache_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        text = path.read_text(encoding="utf-8").strip()
        try:
            return int(text)
        except ValueError as err:
            raise ConfigError(
                f"{path} holds {text!r:.40}, not an integer seed; delete it (a new one is made) "
                "or set bench.holdout_seed"
            ) from err
    seed = secrets.randbits(63)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(f"{seed}\n")
    return seed
