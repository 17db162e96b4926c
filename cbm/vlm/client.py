"""One chat client for hosted and local vision-language models.

:class:`ChatClient` puts the same things around either backend: the disk cache of replies (a
rerun sends nothing; an interrupted run resumes, every reply being on disk when it arrives),
retries with backoff honouring ``Retry-After``, a concurrency limit, and per-run token / cost
accounting. ``chat`` returns a :class:`Reply` or raises one :class:`ChatError` line; ``map`` runs
many requests concurrently and returns each one's reply *or* error, so one failure never stops
a sweep; but an endpoint that refuses the connection before it ever answered (nothing listens at
``base_url``) raises :class:`EndpointUnreachable` from both: bad input, one line, exit code 2.
``ask(prompt, image=None) -> str`` is the interface of the ``llm`` intervener.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from cbm.core.clients import CLIENT_NEED, FACTORY_KIND, client_factory  # noqa: F401 (the names the VLM wing's users know)
from cbm.core.concurrency import drain
from cbm.core.progress import progress_bar_wanted
from cbm.vlm.cache import ReplyCache, cache_key
from cbm.vlm.config import ClientConfig
from cbm.vlm.endpoint import normalise
from cbm.vlm.messages import user_message
from cbm.vlm.reply import ChatError, EndpointUnreachable, Reply
from cbm.vlm.retry import RetryPolicy
from cbm.vlm.usage import Usage

log = logging.getLogger("cbm.vlm")

Messages = list[dict[str, Any]]


class Backend(Protocol):
    model: str

    def complete(self, messages: Messages, params: dict[str, Any]) -> Reply: ...


def endpoint_id(cfg: ClientConfig) -> str:
    """What, besides the model name, identifies who answers (part of the cache key): the hosted
    endpoint's normalised URL, or ``local:<fingerprint of the model directory's files>``."""
    if cfg.backend == "openai":
        return normalise(cfg.endpoint_url())
    from cbm.vlm.weights import fingerprint

    return "local:" + fingerprint(cfg.model, Path(cfg.cache_dir).expanduser() if cfg.cache_dir else None)


def make_backend(cfg: ClientConfig, http_client: Any | None = None) -> Backend:
    """The backend ``cfg.backend`` names (imports its heavy dependencies only then)."""
    if cfg.backend == "openai":
        from cbm.vlm.openai_backend import OpenAIBackend

        return OpenAIBackend(cfg, http_client=http_client)
    from cbm.vlm.local_backend import LocalHFBackend

    return LocalHFBackend(cfg)


class ChatClient:
    """Cache + retries + concurrency limit + accounting around a :class:`Backend`.

    Parameters
    ----------
    cfg : the client's settings.
    backend : optional ready backend (default: built from ``cfg``).
    sleep : the function that waits between retries (tests pass a recorder).
    """

    def __init__(self, cfg: ClientConfig, backend: Backend | None = None, sleep: Callable[[float], None] = time.sleep,
                 http_client: Any | None = None):  # fmt: skip
        self.cfg = cfg
        self.cache = ReplyCache(Path(cfg.cache_dir).expanduser()) if cfg.cache_dir else None
        # the cache key's endpoint; a local model's files are hashed only when replies are cached
        self.endpoint = endpoint_id(cfg) if self.cache is not None or cfg.backend == "openai" else "local"
        self.backend = backend if backend is not None else make_backend(cfg, http_client=http_client)
        self.retry = RetryPolicy(cfg.max_retries, cfg.backoff_s, cfg.max_wait_s)
        self.usage = Usage(cfg.price_in_per_mtok, cfg.price_out_per_mtok)
        self._sleep = sleep
        self._slots = threading.BoundedSemaphore(cfg.concurrency)
        self._rng = random.Random(0)
        #: whether the endpoint has answered this client once (a refused connection before that: :class:`EndpointUnreachable`)
        self._answered = False

    @property
    def model(self) -> str:
        return self.cfg.model

    def messages(self, prompt: str, images: Sequence[Any] = ()) -> Messages:
        """The configured system prompt (if any) and one user turn with ``images`` then ``prompt``."""
        out: Messages = [{"role": "system", "content": self.cfg.system}] if self.cfg.system else []
        return [*out, user_message(prompt, list(images))]

    def chat(self, messages: Messages, **params: Any) -> Reply:
        """One request (``params`` override the configured sampling parameters): the cached
        reply if there is one, else the backend's, retried per the policy; raises :class:`ChatError`."""
        full = {**self.cfg.params(), **params}
        key = cache_key(self.cfg.model, messages, full, self.endpoint)
        if self.cache is not None and (cached := self.cache.get_reply(key)) is not None:
            self.usage.add_reply(cached)
            return cached
        reply = self._send(messages, full)
        if self.cache is not None:
            self.cache.put(key, {"endpoint": self.endpoint, "model": self.cfg.model, "params": full, "reply": reply.to_json()})
        self.usage.add_reply(reply)
        return reply

    def _send(self, messages: Messages, params: dict[str, Any]) -> Reply:
        attempt = 0
        while True:
            try:
                with self._slots:
                    reply = self.backend.complete(messages, params)
                self._answered = True
                return reply
            except ChatError as err:
                retryable = err.kind in ("timeout", "transport") or (err.kind == "http" and self.retry.should_retry(attempt, err.status))
                if not retryable or attempt >= self.retry.max_retries:
                    err.attempts = attempt + 1
                    self.usage.add_failure(err.kind)
                    if err.refused and not self._answered:  # nothing listens there: bad input, the run stops
                        raise EndpointUnreachable(self.cfg.endpoint_url(), err.attempts) from None
                    raise
                wait = self.retry.wait_s(attempt, err.retry_after, rng=self._rng)
                log.info("chat: %s; retry %d/%d in %.1f s", err, attempt + 1, self.retry.max_retries, wait)
                self.usage.add_retry()
                self._sleep(wait)
                attempt += 1

    def try_chat(self, messages: Messages, **params: Any) -> Reply | ChatError:
        """:meth:`chat`, returning the error instead of raising it (an :class:`EndpointUnreachable` is
        raised: it is no request's failure but the endpoint's)."""
        try:
            return self.chat(messages, **params)
        except ChatError as err:
            return err

    def map(self, requests: Sequence[Messages], progress: bool | None = None, desc: str = "chat", **params: Any) -> list[Reply | ChatError]:
        """Every request, ``cfg.concurrency`` at a time, in input order; each result a reply or its
        error. A progress bar shows on a terminal (``progress=None``) or when asked."""
        from tqdm.auto import tqdm

        results: list[Reply | ChatError] = [None] * len(requests)  # type: ignore[list-item]
        bar = tqdm(total=len(requests), desc=desc, disable=not progress_bar_wanted(progress), leave=False)
        with ThreadPoolExecutor(max_workers=self.cfg.concurrency) as pool:
            futures = {pool.submit(self.try_chat, m, **params): i for i, m in enumerate(requests)}

            def keep(fut: Future) -> None:
                results[futures[fut]] = fut.result()
                bar.update(1)

            drain(pool, futures, keep)  # a Ctrl-C stops at once: the queued requests are not sent
        bar.close()
        return results

    def score(self, messages: Messages, prefix: str, options: Sequence[str]) -> list[float]:
        """Log-probability of each option after the assistant ``prefix`` (backends with ``score``:
        the local one); cached like replies."""
        scorer = getattr(self.backend, "score", None)
        if scorer is None:
            raise ValueError(f"client.backend={self.cfg.backend} cannot score options (use backend=local, or generate)")
        key = cache_key(self.cfg.model, messages, {"score": list(options), "prefix": prefix}, self.endpoint)
        if self.cache is not None and (cached := self.cache.get_scores(key, len(options))) is not None:
            return cached
        with self._slots:
            scores = scorer(messages, prefix, list(options))
        if self.cache is not None:
            self.cache.put(key, {"endpoint": self.endpoint, "model": self.cfg.model, "scores": scores})
        return scores

    @classmethod
    def check_settings(cls, settings: dict[str, Any]) -> ClientConfig:
        """The settings a config gives this client, validated (:mod:`cbm.core.clients`)."""
        return ClientConfig.from_mapping(settings)

    @classmethod
    def from_settings(cls, **settings: Any) -> ChatClient:
        """This client built from plain settings (``ClientConfig`` fields)."""
        return cls(ClientConfig.from_mapping(settings))

    def ask(self, prompt: str, image: Any | None = None) -> str:
        """The ``llm`` intervener's interface: one user turn (with the image if given) -> reply text."""
        return self.chat(self.messages(prompt, [] if image is None else [image])).text


client_factory(ChatClient)  # the class itself is a factory too (built from client_kwargs as settings)


@client_factory
def make_client(**settings: Any) -> ChatClient:
    """A :class:`ChatClient` from plain settings (``ClientConfig`` fields): the factory the ``llm``
    intervener's ``client: cbm.vlm.client:make_client`` names, with ``client_kwargs`` as settings."""
    return ChatClient(ClientConfig.from_mapping(settings))


make_client.check_settings = ClientConfig.from_mapping  # type: ignore[attr-defined]  # run before the command starts
