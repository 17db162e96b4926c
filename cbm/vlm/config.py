"""The chat client's settings (``conf/client/*.yaml``): which backend and model, where the endpoint
is, sampling parameters, retries, timeouts, concurrency, cache and prices. Validated on
construction, so a bad value is one clear line before any request is sent."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

BACKENDS = ("openai", "local")
REASONING_EFFORTS = ("minimal", "low", "medium", "high")
DEFAULT_CACHE_DIR = "~/.cache/cbm/vlm"


@dataclass
class ClientConfig:
    """Settings of :class:`cbm.vlm.client.ChatClient`.

    ``backend``: ``openai`` (any OpenAI-compatible chat-completions endpoint: OpenAI, OpenRouter,
    vLLM, a local server) or ``local`` (a Hugging Face vision-language model directory,
    ``model`` being its path). The API key is read from the environment variable ``api_key_env``
    (never written to configs or caches).
    """

    backend: str = "openai"
    model: str = ""
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    headers: dict[str, str] = field(default_factory=dict)
    system: str | None = None
    temperature: float = 0.0
    max_tokens: int = 1024
    reasoning_effort: str | None = None
    seed: int | None = None
    timeout_s: float = 120.0
    max_retries: int = 5
    backoff_s: float = 1.0
    max_wait_s: float = 60.0
    concurrency: int = 4
    cache_dir: str | None = DEFAULT_CACHE_DIR
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0
    device: str = "auto"
    dtype: str = "auto"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"client.backend: unknown backend '{self.backend}' (choose from: {', '.join(BACKENDS)})")
        if not str(self.model).strip():
            raise ValueError("client.model: required (a model name for backend=openai, a model directory for backend=local)")
        if self.backend == "local" and not Path(self.model).expanduser().is_dir():
            raise ValueError(f"client.model: no model directory at '{self.model}' (backend=local loads a local Hugging Face model; no downloads)")
        if self.reasoning_effort is not None and self.reasoning_effort not in REASONING_EFFORTS:
            raise ValueError(f"client.reasoning_effort: '{self.reasoning_effort}' is not one of {', '.join(REASONING_EFFORTS)} (or null)")
        for name in ("temperature", "backoff_s", "max_wait_s", "price_in_per_mtok", "price_out_per_mtok"):
            if float(getattr(self, name)) < 0:
                raise ValueError(f"client.{name}: must be >= 0, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise ValueError(f"client.timeout_s: must be > 0, got {self.timeout_s}")
        if self.max_tokens < 1:
            raise ValueError(f"client.max_tokens: must be >= 1, got {self.max_tokens}")
        if self.max_retries < 0:
            raise ValueError(f"client.max_retries: must be >= 0, got {self.max_retries}")
        if self.concurrency < 1:
            raise ValueError(f"client.concurrency: must be >= 1, got {self.concurrency}")
        if not isinstance(self.headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in self.headers.items()):
            raise ValueError("client.headers: must map header names to string values")

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> ClientConfig:
        """From a plain mapping (a Hydra node or ``client_kwargs``); unknown keys are one clear error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"client: unknown setting(s) {unknown} (known: {', '.join(sorted(known))})")
        return cls(**{k: (dict(v) if k == "headers" and v is not None else v) for k, v in values.items()})

    def params(self) -> dict[str, Any]:
        """The sampling parameters that change a reply (part of the cache key)."""
        out: dict[str, Any] = {"temperature": float(self.temperature), "max_tokens": int(self.max_tokens)}
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        if self.seed is not None:
            out["seed"] = int(self.seed)
        return out

    def public(self) -> dict[str, Any]:
        """The settings as a plain dict (for run records; holds no secret: the key stays in the environment)."""
        return asdict(self)
