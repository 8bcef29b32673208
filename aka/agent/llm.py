"""The LLM proposer: candidate kernels from any litellm model, prompted with all the loop knows.

``LLMProposer`` renders the prompt templates of ``aka/agent/prompts/`` (Jinja2) from a
``ProposalContext``, calls ``litellm.completion`` once per wanted candidate, and parses each reply
into a ``Proposal`` (``aka.agent.extract``). Any provider string works (``openai/gpt-4o``,
``anthropic/claude-...``, ``ollama/llama3``), and ``api_base`` points it at a local
OpenAI-compatible server (vLLM, Ollama, llama.cpp).

Retries live here and only here (STYLE E7): transient failures (connection errors, timeouts, 429,
5xx) are retried with exponential backoff and jitter up to ``LLMConfig.max_retries`` times, then
raise ``LLMError`` naming the model, the endpoint and the last error; anything else (a bad key, an
unknown model) raises at once with a fix hint. The API key is passed to litellm and never logged.

litellm is imported lazily (it takes seconds), the first time a call is made.
"""

from __future__ import annotations

import logging
import math
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from aka.agent.extract import extract_proposal, normalize_family
from aka.agent.records import (
    CandidateRecord,
    KBSnippet,
    Proposal,
    ProposalBatch,
    ProposalContext,
    TokenUsage,
)
from aka.core.config import LLMConfig, apply_offline_defaults
from aka.core.errors import ConfigError, LLMError

__all__ = [
    "CompletionFn",
    "CostFn",
    "LLMProposer",
    "PromptLimits",
    "bound_conversation",
    "history_lines",
    "is_transient",
    "render_system_prompt",
    "render_user_prompt",
]

logger = logging.getLogger(__name__)

#: ``litellm.completion``'s shape: keyword arguments in, a response (object or mapping) out.
CompletionFn = Callable[..., Any]
#: Prices one response in USD (default: ``litellm.completion_cost``).
CostFn = Callable[[Any], float]

#: Sent to a loopback ``api_base`` when no key is configured: local servers usually need none,
#: but the OpenAI client refuses to send a request without one.
_LOCAL_PLACEHOLDER_KEY = "no-key"
_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
_TRANSIENT_CLASSES = (
    "Timeout",
    "APIConnectionError",
    "RateLimitError",
    "InternalServerError",
    "ServiceUnavailableError",
    "BadGatewayError",
)
_PERMANENT_CLASSES = (
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "BadRequestError",
    "UnprocessableEntityError",
)
_MISSING_KEY_MARKERS = ("missing credentials", "api_key client option must be set")
_ERROR_TEXT_MAX = 500


@dataclass(frozen=True)
class PromptLimits:
    """Caps that keep a prompt bounded, in lines and characters.

    Attributes:
        history_lines: History records shown (records with a lesson are kept first).
        history_message_chars: Characters of a record's message or lesson in its line.
        reference_chars: The reference source.
        incumbent_chars: The incumbent's source.
        description_chars: The problem's description.
        profile_chars: The profile summary.
        kb_snippets: Knowledge snippets shown at most.
        kb_snippet_chars: Characters of one snippet's text.
        kb_total_chars: Characters of all snippets together.
        conversation_chars: Earlier turns re-sent (the most recent ones that fit).
        reply_chars: Characters of one reply kept in the stored conversation.
    """

    history_lines: int = 12
    history_message_chars: int = 160
    reference_chars: int = 12_000
    incumbent_chars: int = 16_000
    description_chars: int = 2_000
    profile_chars: int = 2_000
    kb_snippets: int = 8
    kb_snippet_chars: int = 1_500
    kb_total_chars: int = 8_000
    conversation_chars: int = 24_000
    reply_chars: int = 8_000


# --------------------------------------------------------------------------------- templates


@lru_cache(maxsize=8)
def _environment(templates_dir: str | None) -> Any:
    import jinja2

    loader: jinja2.BaseLoader
    if templates_dir is None:
        loader = jinja2.PackageLoader("aka.agent", "prompts")
    else:
        loader = jinja2.FileSystemLoader(templates_dir)
    return jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # prompts are Markdown for a model, not HTML
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _render(templates_dir: Path | None, name: str, values: Mapping[str, Any]) -> str:
    import jinja2

    env = _environment(str(templates_dir) if templates_dir is not None else None)
    try:
        text: str = env.get_template(name).render(**values)
    except jinja2.TemplateError as err:
        where = templates_dir if templates_dir is not None else "aka/agent/prompts"
        raise ConfigError(
            f"prompt template {where}/{name} failed to render: {err}; fix the template or "
            "drop the templates_dir override to use the packaged prompts"
        ) from err
    return _squeeze_blank_lines(text)


def _squeeze_blank_lines(text: str) -> str:
    """Collapse runs of blank lines that template logic leaves, never inside code fences."""
    lines: list[str] = []
    in_code = False
    for line in text.rstrip().splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code or line.strip() or (lines and lines[-1].strip()):
            lines.append(line)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ formatting


def _clip(text: str, limit: int) -> str:
    """Keep the head and the tail of ``text`` within ``limit`` characters, marking the cut."""
    text = text.rstrip()
    if len(text) <= limit:
        return text
    marker = "\n... [{} characters omitted] ...\n"
    keep = max(limit - len(marker) - 8, 0)
    head = keep * 2 // 3
    tail = keep - head
    omitted = len(text) - head - tail
    return text[:head] + marker.format(omitted) + (text[-tail:] if tail else "")


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 3, 0)].rstrip() + "..."


def _num(value: float | None, spec: str = ".3g", suffix: str = "") -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:{spec}}{suffix}"


def _hardware_lines(hardware: Mapping[str, Any], prefix: str = "") -> list[str]:
    lines: list[str] = []
    for key, value in hardware.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            lines.extend(_hardware_lines(value, f"{name}."))
        elif isinstance(value, list | tuple):
            lines.append(f"{name}: {', '.join(str(v) for v in value)}")
        elif isinstance(value, float):
            lines.append(f"{name}: {value:.4g}")
        elif value is not None:
            lines.append(f"{name}: {value}")
    return lines


def _results(record: CandidateRecord) -> str:
    parts = [record.verdict]
    if record.score is not None:
        parts.append(f"SOL {record.score:.3f}")
    if record.speedup_eager is not None:
        parts.append(f"{record.speedup_eager:.2f}x vs eager")
    if record.speedup_compile is not None:
        parts.append(f"{record.speedup_compile:.2f}x vs torch.compile")
    return ", ".join(parts)


def history_lines(
    history: Sequence[CandidateRecord], limits: PromptLimits
) -> tuple[list[str], int]:
    """Compress the history to one line per record, capped, oldest first.

    Records with a correctness lesson are kept before others (dropout keeps them for the same
    reason); the rest of the cap goes to the most recent records.

    Returns:
        The lines and how many records were left out.
    """
    cap = max(limits.history_lines, 0)
    with_lesson = [i for i, r in enumerate(history) if r.lesson]
    keep = set(with_lesson[-cap:]) if cap else set()
    for i in range(len(history) - 1, -1, -1):
        if len(keep) >= cap:
            break
        keep.add(i)
    lines: list[str] = []
    for i in sorted(keep):
        record = history[i]
        line = f"{record.id} [{record.family}] {_results(record)}"
        if record.message:
            line += f" - {_one_line(record.message, limits.history_message_chars)}"
        if record.lesson:
            line += f" - lesson: {_one_line(record.lesson, limits.history_message_chars)}"
        lines.append(line)
    return lines, len(history) - len(keep)


def _kb_view(
    snippets: Sequence[KBSnippet], limits: PromptLimits
) -> tuple[list[dict[str, str]], int]:
    shown: list[dict[str, str]] = []
    budget = limits.kb_total_chars
    for snippet in snippets[: limits.kb_snippets]:
        if budget <= 0:
            break
        text = _clip(snippet.text, min(limits.kb_snippet_chars, budget))
        budget -= len(text)
        shown.append({"id": snippet.id, "title": snippet.title, "kind": snippet.kind, "text": text})
    return shown, len(snippets) - len(shown)


def _incumbent_view(ctx: ProposalContext, limits: PromptLimits) -> dict[str, Any] | None:
    record = ctx.incumbent
    if record is None:
        return None
    if ctx.performance_measured:
        headline = _results(record)
    else:
        headline = f"{record.verdict} (correct on every checked shape; performance not measured)"
    shapes = [
        {
            "shape_id": s.shape_id,
            "verdict": s.verdict,
            "latency": _num(s.latency_us, ".2f"),
            "sol": _num(s.sol_fraction, ".3f"),
            "eager": _num(s.speedup_eager, ".2f", "x"),
            "compile": _num(s.speedup_compile, ".2f", "x"),
            "bound": s.bound or "n/a",
        }
        for s in record.shapes
    ]
    source = _clip(ctx.incumbent_source, limits.incumbent_chars) if ctx.incumbent_source else ""
    return {
        "id": record.id,
        "family": record.family,
        "headline": headline,
        "shapes": shapes,
        "source": source,
    }


def render_system_prompt(ctx: ProposalContext, *, templates_dir: Path | None = None) -> str:
    """Render the system prompt (role, candidate contract for ``ctx.dsl``, reply format)."""
    return _render(templates_dir, "system.md.j2", {"dsl": ctx.dsl})


def render_user_prompt(
    ctx: ProposalContext,
    *,
    index: int = 1,
    sibling_families: Sequence[str] = (),
    templates_dir: Path | None = None,
    limits: PromptLimits | None = None,
) -> str:
    """Render this round's user prompt from everything in ``ctx``, within ``limits``.

    Args:
        ctx: The round's context.
        index: Which of the round's ``ctx.n`` candidates this prompt asks for (1-based).
        sibling_families: Families the round's earlier candidates already used.
        templates_dir: A folder overriding the packaged templates.
        limits: Prompt caps (default ``PromptLimits()``).

    Returns:
        The Markdown prompt.
    """
    limits = limits or PromptLimits()
    lines, omitted = history_lines(ctx.history, limits)
    kb, kb_omitted = _kb_view(ctx.kb, limits)
    profile = None
    if ctx.profile is not None:
        profile = {
            "candidate_id": ctx.profile.candidate_id,
            "summary": _clip(ctx.profile.summary, limits.profile_chars),
            "hints": [_one_line(h, 200) for h in ctx.profile.hints[:8]],
        }
    target = f"{'CUDA C++' if ctx.dsl == 'cuda' else 'Triton'} kernels"
    if ctx.arch:
        target += f" for {ctx.arch}"
    values = {
        "round": ctx.round,
        "index": index,
        "n": ctx.n,
        "dsl": ctx.dsl,
        "target": target,
        "problem": {
            "name": ctx.problem_name,
            "op_family": ctx.op_family,
            "description": _clip(ctx.description, limits.description_chars),
        },
        "reference": _clip(ctx.reference_source, limits.reference_chars),
        "init_signature": ctx.init_signature,
        "forward_signature": ctx.forward_signature,
        "hardware": _hardware_lines(ctx.hardware),
        "performance_measured": ctx.performance_measured,
        "incumbent": _incumbent_view(ctx, limits),
        "profile": profile,
        "history": lines,
        "history_omitted": omitted,
        "kb": kb,
        "kb_omitted": kb_omitted,
        "forbidden_families": list(ctx.forbidden_families),
        "sibling_families": list(dict.fromkeys(sibling_families)),
        "tried": len(ctx.tried_sources),
        "kernel_kind": (
            "CUDA kernels built with `torch.utils.cpp_extension.load_inline`"
            if ctx.dsl == "cuda"
            else "`@triton.jit` kernels"
        ),
    }
    return _render(templates_dir, "propose.md.j2", values)


def bound_conversation(
    conversation: Sequence[Mapping[str, str]], max_chars: int
) -> list[dict[str, str]]:
    """Return the most recent turns that fit in ``max_chars``, starting with a user turn."""
    kept: list[dict[str, str]] = []
    total = 0
    for turn in reversed(conversation):
        size = len(turn.get("content", ""))
        if total + size > max_chars:
            break
        kept.append({"role": turn["role"], "content": turn.get("content", "")})
        total += size
    kept.reverse()
    while kept and kept[0]["role"] != "user":
        kept.pop(0)
    return kept


def _transcript(messages: Sequence[Mapping[str, str]]) -> str:
    return "\n\n".join(f"<<< {m['role']} >>>\n{m['content'].rstrip()}" for m in messages) + "\n"


# ----------------------------------------------------------------------------- the provider


def _load_litellm() -> Any:
    """Import litellm once, offline-safe and quiet (no cost-map download, no debug banners)."""
    apply_offline_defaults()
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def is_transient(err: BaseException) -> bool:
    """Whether a provider error is worth retrying: connection, timeout, 429, 5xx.

    litellm's exception classes decide when litellm is loaded; otherwise (an injected completion
    function) the error's ``status_code`` and the built-in connection/timeout errors do.
    """
    if _missing_key(err):
        return False
    litellm = sys.modules.get("litellm")
    if litellm is not None:
        permanent = tuple(getattr(litellm, n) for n in _PERMANENT_CLASSES if hasattr(litellm, n))
        if permanent and isinstance(err, permanent):
            return False
        transient = tuple(getattr(litellm, n) for n in _TRANSIENT_CLASSES if hasattr(litellm, n))
        if transient and isinstance(err, transient):
            return True
    if isinstance(err, ConnectionError | TimeoutError):
        return True
    status = getattr(err, "status_code", None)
    return isinstance(status, int) and (status in _TRANSIENT_STATUS or status >= 500)


def _missing_key(err: BaseException) -> bool:
    text = str(err).lower()
    return any(marker in text for marker in _MISSING_KEY_MARKERS)


def _retry_after(err: BaseException) -> float | None:
    response = getattr(err, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        value = headers.get("retry-after")
        return float(value) if value is not None else None
    except (TypeError, ValueError, AttributeError):
        return None


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _is_loopback(api_base: str | None) -> bool:
    if not api_base:
        return False
    host = urlparse(api_base).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


class LLMProposer:
    """Proposes candidate files by prompting a litellm model (the ``Proposer`` protocol).

    Args:
        config: Model, endpoint, key, sampling and retry settings (``Settings.llm``).
        templates_dir: A folder with ``system.md.j2`` and ``propose.md.j2`` (and the partials they
            include) overriding the packaged prompts.
        completion: The completion function (default ``litellm.completion``, imported lazily).
        cost: Prices a response in USD (default ``litellm.completion_cost``; 0.0 when unknown).
        limits: Prompt caps; pass ``PromptLimits(history_lines=AgentConfig.max_history_prompt)``.
        backoff_s: First retry delay; it doubles per attempt (with jitter), capped at
            ``max_backoff_s``; a server's ``Retry-After`` is honoured up to the cap.
        max_backoff_s: Longest delay between attempts.
        sleep: Waits between attempts (tests record the delays instead of sleeping).
        seed: Seeds the jitter.

    Raises:
        ConfigError: ``config.model`` is not set.
    """

    def __init__(
        self,
        config: LLMConfig,
        *,
        templates_dir: Path | None = None,
        completion: CompletionFn | None = None,
        cost: CostFn | None = None,
        limits: PromptLimits | None = None,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        seed: int | None = None,
    ) -> None:
        if not config.model:
            raise ConfigError(
                "llm.model is not set: give a litellm model string such as 'openai/gpt-4o' or "
                "'ollama/llama3' (--model or AKA_LLM__MODEL), or use the search proposer"
            )
        self.config = config
        self.model: str = config.model
        self.name = f"llm:{config.model}"
        self.templates_dir = templates_dir
        self.limits = limits or PromptLimits()
        self.backoff_s = max(backoff_s, 0.0)
        self.max_backoff_s = max(max_backoff_s, 0.0)
        self._completion = completion
        self._cost = cost
        self._sleep = sleep
        self._rng = random.Random(seed)

    # -- Proposer --------------------------------------------------------------------------

    def propose(self, ctx: ProposalContext) -> ProposalBatch:
        """Ask the model for ``ctx.n`` candidates, one completion each.

        Every call sends ``[system] + ctx.conversation (bounded) + [this round's prompt]``. The
        returned ``messages`` are this round's turns for the graph to append: one user turn that
        names the round and one assistant turn holding the replies (clipped).

        Raises:
            LLMError: The first call failed (after retries for transient errors). A failure after
                at least one reply ends the round early with what was obtained, and a note.
        """
        system = render_system_prompt(ctx, templates_dir=self.templates_dir)
        earlier = bound_conversation(ctx.conversation, self.limits.conversation_chars)
        proposals: list[Proposal] = []
        replies: list[str] = []
        notes: list[str] = []
        usage = TokenUsage()
        families: list[str] = []
        for index in range(1, ctx.n + 1):
            user = render_user_prompt(
                ctx,
                index=index,
                sibling_families=families,
                templates_dir=self.templates_dir,
                limits=self.limits,
            )
            messages = [{"role": "system", "content": system}, *earlier]
            messages.append({"role": "user", "content": user})
            try:
                text, finish_reason, call_usage = self._call(messages)
            except LLMError as err:
                if not proposals:
                    raise
                notes.append(f"candidate {index} of {ctx.n} not proposed: {err.message}")
                logger.warning("round %d: candidate %d of %d not proposed", ctx.round, index, ctx.n)
                break
            usage = usage + call_usage
            proposal = extract_proposal(
                text,
                origin=self.name,
                prompt=_transcript(messages),
                params={"temperature": self.config.temperature},
            )
            if proposal.error and finish_reason == "length":
                proposal = proposal.model_copy(
                    update={
                        "error": f"{proposal.error} (the reply was cut at "
                        f"{self.config.max_output_tokens} tokens; raise llm.max_output_tokens)"
                    }
                )
            if proposal.source is not None:
                families.append(proposal.family)
            if proposal.family in {normalize_family(f) for f in ctx.forbidden_families}:
                notes.append(f"candidate {index} names the forbidden family '{proposal.family}'")
            proposals.append(proposal)
            replies.append(text)
        return ProposalBatch(
            proposals=proposals,
            usage=usage,
            messages=self._turns(ctx, replies),
            notes=notes,
        )

    def _turns(self, ctx: ProposalContext, replies: Sequence[str]) -> list[dict[str, str]]:
        """This round's conversation turns: a short request and the replies.

        The full prompt restates the problem every round, so re-sending old prompts would only
        repeat it; the replies are what the model cannot otherwise see again.
        """
        request = (
            f"Round {ctx.round}: write {ctx.n} candidate(s) for {ctx.problem_name} "
            "(the full context is restated in the latest message)."
        )
        if ctx.forbidden_families:
            request += f" Forbidden families: {', '.join(ctx.forbidden_families)}."
        if not replies:
            return []
        answer = "\n\n".join(
            f"Candidate {i} of round {ctx.round}:\n{_clip(reply, self.limits.reply_chars)}"
            for i, reply in enumerate(replies, start=1)
        )
        return [{"role": "user", "content": request}, {"role": "assistant", "content": answer}]

    # -- the provider call -----------------------------------------------------------------

    def _kwargs(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "timeout": self.config.timeout_s,
            "max_tokens": self.config.max_output_tokens,
            "max_retries": 0,  # the OpenAI client's own retries would hide ours
            "drop_params": True,  # a provider that lacks a parameter ignores it
        }
        if self.config.api_base:
            kwargs["api_base"] = self.config.api_base
        if self.config.api_key is not None:
            kwargs["api_key"] = self.config.api_key.get_secret_value()
        elif _is_loopback(self.config.api_base):
            kwargs["api_key"] = _LOCAL_PLACEHOLDER_KEY
        return kwargs

    def _call(self, messages: list[dict[str, str]]) -> tuple[str, str | None, TokenUsage]:
        completion = self._completion or _load_litellm().completion
        kwargs = self._kwargs(messages)
        attempts = self.config.max_retries + 1
        last: Exception | None = None
        for attempt in range(1, attempts + 1):
            try:
                response = completion(**kwargs)
            except Exception as err:  # the provider boundary: typed below, chained
                if not is_transient(err):
                    raise LLMError(self._failure(err, attempt, transient=False)) from err
                last = err
                if attempt == attempts:
                    break
                delay = self._delay(attempt, err)
                logger.warning(
                    "LLM call to %s failed (%s); retry %d of %d in %.2f s",
                    self.model,
                    type(err).__name__,
                    attempt,
                    attempts - 1,
                    delay,
                )
                self._sleep(delay)
                continue
            return self._parse(response)
        if last is None:  # unreachable: attempts >= 1
            raise LLMError(f"LLM call to model '{self.model}' made no attempt")
        raise LLMError(self._failure(last, attempts, transient=True)) from last

    def _delay(self, attempt: int, err: BaseException) -> float:
        base = min(self.backoff_s * 2.0 ** (attempt - 1), self.max_backoff_s)
        delay = base * self._rng.uniform(0.5, 1.5)
        hinted = _retry_after(err)
        if hinted is not None:
            delay = max(delay, min(hinted, self.max_backoff_s))
        return min(delay, self.max_backoff_s)

    def _parse(self, response: Any) -> tuple[str, str | None, TokenUsage]:
        choices = _get(response, "choices") or []
        text = ""
        finish_reason: str | None = None
        if choices:
            message = _get(choices[0], "message")
            text = str(_get(message, "content") or "") if message is not None else ""
            finish_reason = _get(choices[0], "finish_reason")
        raw_usage = _get(response, "usage")
        prompt_tokens = int(_get(raw_usage, "prompt_tokens") or 0) if raw_usage else 0
        completion_tokens = int(_get(raw_usage, "completion_tokens") or 0) if raw_usage else 0
        usage = TokenUsage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=self._price(response),
            calls=1,
        )
        return text, finish_reason, usage

    def _price(self, response: Any) -> float:
        """The response's cost in USD; 0.0 when the model has no price (never raises)."""
        try:
            if self._cost is not None:
                value = float(self._cost(response))
            else:
                litellm = _load_litellm()
                value = float(litellm.completion_cost(completion_response=response))
        except Exception as err:  # an unpriced model is normal (local servers)
            logger.debug("no cost for %s: %s", self.model, err)
            return 0.0
        return value if math.isfinite(value) and value > 0 else 0.0

    def _failure(self, err: BaseException, attempts: int, *, transient: bool) -> str:
        where = self.config.api_base or "the provider's default endpoint"
        text = _one_line(str(err), _ERROR_TEXT_MAX)
        if self.config.api_key is not None:
            secret = self.config.api_key.get_secret_value()
            if secret:
                text = text.replace(secret, "***")
        status = getattr(err, "status_code", None)
        return (
            f"LLM call to model '{self.model}' at {where} failed after {attempts} attempt(s): "
            f"{type(err).__name__}"
            f"{f' (HTTP {status})' if isinstance(status, int) else ''}: {text}. "
            f"Fix: {self._hint(err, status, transient)}"
        )

    def _hint(self, err: BaseException, status: Any, transient: bool) -> str:
        name = type(err).__name__
        if transient:
            return (
                "the provider kept failing; check that the server is up and reachable, or raise "
                "llm.max_retries / llm.timeout_s"
            )
        if _missing_key(err) or status in (401, 403) or "Authentication" in name:
            return (
                "set a valid API key for this provider (llm.api_key, AKA_LLM__API_KEY, or the "
                "provider's own variable); a local server without authentication takes any value"
            )
        if "ContextWindow" in name:
            return (
                "the prompt does not fit the model's context; lower llm.max_output_tokens or use "
                "a model with a longer context"
            )
        if status == 404 or "NotFound" in name:
            return (
                "check that the model name (llm.model) exists at this endpoint, and that "
                "llm.api_base ends in /v1 for OpenAI-compatible servers"
            )
        return (
            "check llm.model is a litellm model string '<provider>/<name>' (openai/gpt-4o, "
            "anthropic/claude-sonnet-4-5, ollama/llama3, hosted_vllm/<name>) and the request "
            "parameters (llm.max_output_tokens, llm.temperature)"
        )
