"""The chat client's settings (``conf/client/*.yaml``): which backend and model, where the endpoint
is, sampling parameters, retries, timeouts, concurrency, cache and prices. Validated on
construction, so a bad value is one clear line before any request is sent."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from cbm.core.safe_paths import check_creatable
from cbm.core.validation import check_fields
from cbm.vlm.endpoint import CREDENTIAL_HEADERS, check_endpoint, effective_base_url, parse_base_url

BACKENDS = ("openai", "local")
REASONING_EFFORTS = ("minimal", "low", "medium", "high")
DTYPES = ("auto", "float32", "float16", "bfloat16")
DEFAULT_CACHE_DIR = "~/.cache/cbm/vlm"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEVICE = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")
#: An HTTP header name (an RFC 9110 token).
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@dataclass
class ClientConfig:
    """Settings of :class:`cbm.vlm.client.ChatClient`.

    ``backend``: ``openai`` (any OpenAI-compatible chat-completions endpoint: OpenAI, OpenRouter,
    vLLM, a local server) or ``local`` (a Hugging Face vision-language model directory,
    ``model`` being its path). The API key is read from the environment variable ``api_key_env``
    (never written to configs or caches) and is sent only over https, to a loopback host
    (127.0.0.0/8, ::1, localhost) reached without a proxy, or with ``allow_insecure: true``;
    anything else is refused with one line before any connection.
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
    #: First retry wait in seconds; doubled each attempt (times a jitter in [0.5, 1]), at most ``max_wait_s``.
    backoff_s: float = 1.0
    #: Longest wait in seconds before a retry, also the cap on a server's ``Retry-After``.
    max_wait_s: float = 60.0
    concurrency: int = 4
    cache_dir: str | None = DEFAULT_CACHE_DIR
    price_in_per_mtok: float = 0.0
    #: USD per million completion tokens (cost accounting; 0: not counted).
    price_out_per_mtok: float = 0.0
    device: str = "auto"
    #: Local backend: weight dtype (float32 | float16 | bfloat16); ``auto``: the checkpoint's own.
    dtype: str = "auto"
    #: Send the API key over plain http to a non-loopback host (it travels readable on the network).
    allow_insecure: bool = False

    def __post_init__(self) -> None:
        if self.headers is None:  # conf/client/openai.yaml: null, so that client.headers={...} sets them
            self.headers = {}
        self._coerce()
        if isinstance(self.headers, Mapping):
            self._check_headers()  # before the types: names the header whose value is not a string
        check_fields(self, "client.")
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
        if not ENV_NAME.fullmatch(self.api_key_env):
            raise ValueError(f"client.api_key_env: {self.api_key_env!r} is not an environment variable name")
        if self.dtype not in DTYPES:
            raise ValueError(f"client.dtype: '{self.dtype}' is not one of {', '.join(DTYPES)}")
        if not DEVICE.fullmatch(self.device):
            raise ValueError(f"client.device: '{self.device}' is not auto, cpu, mps, cuda or cuda:<index>")
        if self.base_url is not None:
            parse_base_url(self.base_url)
        if self.cache_dir:  # a file there (or a read-only place) is refused now, not after a run's first files are written
            check_creatable(Path(self.cache_dir).expanduser(), "client.cache_dir")
        if self.backend == "openai":
            self.check_endpoint()

    def _coerce(self) -> None:
        """The small conversions YAML and the command line need: an integer where a number goes
        (``temperature=1``), a numeric model name (``model=7``)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and not isinstance(value, bool):
                if f.name == "model":
                    setattr(self, f.name, str(value))
                elif f.type in ("float", float):
                    setattr(self, f.name, float(value))

    def _check_headers(self) -> None:
        for name, value in self.headers.items():
            if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
                raise ValueError(f"client.headers: {name!r} is not a valid header name")
            if not isinstance(value, str):
                raise ValueError(f"client.headers: value of '{name}' must be a string, got {type(value).__name__} {value!r}")
            if any((ord(ch) < 32 and ch != "\t") or ord(ch) == 127 for ch in value):
                raise ValueError(f"client.headers: value of '{name}' contains control characters (a line break ends a header)")

    def endpoint_url(self) -> str:
        """The URL requests go to (``base_url``, else ``$OPENAI_BASE_URL``, else the SDK's default)."""
        return effective_base_url(self.base_url)[0]

    def api_key(self) -> str | None:
        """The API key from the environment variable ``api_key_env`` (``None`` when unset or empty)."""
        return os.environ.get(self.api_key_env) or None

    def check_endpoint(self) -> str | None:
        """The hosted endpoint's checks before any connection (:func:`cbm.vlm.endpoint.check_endpoint`):
        a valid URL; a key present for a hosted https endpoint; no key or credential header in clear
        text unless ``allow_insecure``. Returns the key it checked (``None``: none set); the backend
        re-runs it and sends that key, as the environment may have changed since validation."""
        return check_endpoint(self.base_url, self.api_key_env, self.headers, self.allow_insecure, "client")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ClientConfig:
        """From a plain mapping (a Hydra node or ``client_kwargs``); unknown keys are one clear error."""
        if not isinstance(values, Mapping):
            raise ValueError(f"client: must be a mapping of settings, got {type(values).__name__} {values!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in values if k not in known)
        if unknown:
            raise ValueError(f"client: unknown setting(s) {unknown} (known: {', '.join(sorted(known))})")
        return cls(**{k: (dict(v) if k == "headers" and isinstance(v, Mapping) else v) for k, v in values.items()})

    def params(self) -> dict[str, Any]:
        """The sampling parameters that change a reply (part of the cache key)."""
        out: dict[str, Any] = {"temperature": float(self.temperature), "max_tokens": int(self.max_tokens)}
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        if self.seed is not None:
            out["seed"] = int(self.seed)
        return out

    def public(self) -> dict[str, Any]:
        """The settings as a plain dict for run records: no secret (the key stays in the environment,
        credential headers are masked)."""
        out = asdict(self)
        out["headers"] = {k: ("***" if k.lower() in CREDENTIAL_HEADERS else v) for k, v in self.headers.items()}
        return out

