"""Hosted models through the ``openai`` SDK: any OpenAI-compatible chat-completions endpoint
(OpenAI, OpenRouter, vLLM, a local server) with a configurable base URL, key and headers. The
settings' endpoint checks (:meth:`ClientConfig.check_endpoint`: no key in clear text to a
non-loopback host) run again before the SDK client exists, so no request can precede them.

One attempt per call: the SDK's own retries are off (``max_retries=0``) so that
:class:`cbm.vlm.client.ChatClient` owns retries, backoff and ``Retry-After`` in one place, and
every SDK failure becomes a :class:`ChatError` of a known kind."""

from __future__ import annotations

import re
import time
from typing import Any

from cbm.vlm.config import ClientConfig
from cbm.vlm.reply import ChatError, Reply, connection_refused

#: Fields in which endpoints return the reasoning text (OpenRouter: ``reasoning``; vLLM, DeepSeek:
#: ``reasoning_content``).
REASONING_FIELDS = ("reasoning", "reasoning_content")
#: Key sent when the environment holds none (local servers accept any key; no secret).
NO_KEY = "not-needed"
#: Models that take ``max_completion_tokens`` and only their default temperature (OpenAI's reasoning
#: models: o1, o3, o4-mini, GPT-5 ...), matched on the model name without a provider prefix.
REASONING_MODEL = re.compile(r"^(?:o\d+(?:-[\w.-]+)?|gpt-5[\w.-]*)$", re.IGNORECASE)


def adapt_params(model: str, params: dict[str, Any], error: str = "") -> dict[str, Any]:
    """``params`` as a reasoning model's endpoint takes them: ``max_completion_tokens`` for
    ``max_tokens`` and no ``temperature`` when the model name is a reasoning model's or the endpoint's
    ``error`` said it does not support them; else unchanged."""
    out = dict(params)
    bare = model.rsplit("/", 1)[-1]
    reasoning = bool(REASONING_MODEL.match(bare))
    if "max_tokens" in out and (reasoning or ("max_tokens" in error and "max_completion_tokens" in error)):
        out["max_completion_tokens"] = out.pop("max_tokens")
    if "temperature" in out and (reasoning or re.search(r"temperature.{0,80}(unsupported|not support|only the default)|"
                                                        r"(unsupported|not support).{0,80}temperature", error, re.IGNORECASE)):  # fmt: skip
        out.pop("temperature")
    return out


class OpenAIBackend:
    """``complete(messages, params) -> Reply`` over ``POST {base_url}/chat/completions``."""

    def __init__(self, cfg: ClientConfig, http_client: Any | None = None):
        import openai

        self._openai = openai
        self.model = cfg.model
        key = cfg.check_endpoint()  # again here: the environment may have changed since validation
        self.base_url = cfg.endpoint_url()
        self._client = openai.OpenAI(
            api_key=key or NO_KEY, base_url=self.base_url, default_headers=cfg.headers or None,
            timeout=cfg.timeout_s, max_retries=0, http_client=http_client,
        )  # fmt: skip
        #: the endpoint's last word on the parameters (an HTTP 400 naming one it does not support)
        self._rejected = ""

    def complete(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> Reply:
        oa = self._openai
        if "prefix" in params:
            raise ValueError("an assistant prefix is only supported by the local backend")
        t0 = time.perf_counter()
        sent = adapt_params(self.model, params, self._rejected)
        try:
            while True:
                try:
                    resp = self._client.chat.completions.create(model=self.model, messages=messages, **sent)
                    break
                except oa.BadRequestError as err:  # a parameter this model does not take: dropped, remembered
                    said = f"{self._rejected}\n{getattr(err, 'message', '') or err}"
                    again = adapt_params(self.model, sent, said)
                    if again == sent:  # nothing left to adapt: the error stands
                        raise
                    self._rejected, sent = said, again
        except oa.APITimeoutError as err:
            raise ChatError("timeout", f"request timed out ({err})") from None
        except oa.APIConnectionError as err:
            raise ChatError("transport", f"cannot reach the endpoint ({err.__cause__ or err})", refused=connection_refused(err)) from None
        except oa.APIStatusError as err:
            body = getattr(err, "message", "") or ""
            raise ChatError("http", f"HTTP {err.status_code}: {body}", status=err.status_code,
                            retry_after=err.response.headers.get("retry-after")) from None  # fmt: skip
        except (oa.APIResponseValidationError, ValueError) as err:  # ValueError: a body that is not JSON
            raise ChatError("malformed", f"reply is not a chat completion ({type(err).__name__}: {err})") from None
        return _to_reply(resp, self.model, time.perf_counter() - t0)


def _to_reply(resp: Any, model: str, latency_s: float) -> Reply:
    """A :class:`Reply` from an SDK response; anything that is not a chat completion with a message
    (a plain string, no choices, no content) is a ``malformed`` :class:`ChatError`."""
    choices = getattr(resp, "choices", None)
    if not choices:
        shown = resp if isinstance(resp, str) else type(resp).__name__
        raise ChatError("malformed", f"reply has no choices: {str(shown)[:120]!r}")
    msg = getattr(choices[0], "message", None)
    text = getattr(msg, "content", None)
    if msg is None or (text is None and not getattr(msg, "refusal", None)):
        raise ChatError("malformed", "reply's first choice has no message content")
    extra = getattr(msg, "model_extra", None) or {}
    reasoning = next((extra[f] for f in REASONING_FIELDS if isinstance(extra.get(f), str)), None)
    usage = getattr(resp, "usage", None)
    return Reply(
        text=text if text is not None else "", model=getattr(resp, "model", None) or model, reasoning=reasoning,
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0), completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        finish_reason=getattr(choices[0], "finish_reason", None), latency_s=latency_s,
    )  # fmt: skip
