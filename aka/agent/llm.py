"""The LLM proposer: candidate kernels from any litellm model, prompted with all the loop knows.

``LLMProposer`` renders the prompts for a ``ProposalContext`` (``aka.agent.prompting``, from the
Jinja2 templates of ``aka/agent/prompts/``), calls ``litellm.completion`` once per wanted
candidate, and parses each reply into a ``Proposal`` (``aka.agent.extract``). Any provider string
works (``openai/gpt-4o``, ``anthropic/claude-...``, ``ollama/llama3``), and ``api_base`` points it
at a local OpenAI-compatible server (vLLM, Ollama, llama.cpp).

Retries live here and only here (STYLE E7): transient failures (connection errors, timeouts, 429,
5xx) are retried with exponential backoff and jitter up to ``LLMConfig.max_retries`` times, then
raise ``LLMError`` naming the model, the endpoint and the last error; anything else (a bad key, an
unknown model) raises at once with a fix hint. The API key is passed to litellm and never logged.
Token usage and cost are summed per round.

The prompt-building names (``PromptLimits``, ``render_system_prompt``, ...) are re-exported from
``aka.agent.prompting`` so that existing imports keep working.

litellm is imported lazily (it takes seconds), the first time a call is made.
"""

from __future__ import annotations

import logging
import math
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from aka.agent.extract import extract_proposal, normalize_family
from aka.agent.prompting import (
    PromptLimits,
    bound_conversation,
    clip_text,
    history_lines,
    one_line,
    render_system_prompt,
    render_user_prompt,
)
from aka.agent.records import Proposal, ProposalBatch, ProposalContext, TokenUsage
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
            f"Candidate {i} of round {ctx.round}:\n{clip_text(reply, self.limits.reply_chars)}"
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
        text = one_line(str(err), _ERROR_TEXT_MAX)
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
