"""Where a hosted client's requests go, and whether its secrets may go there.

A base URL is checked when the settings are read (an ``http``/``https`` URL with a host, no
spaces or control characters, no credentials in it), so a typo is one line at start, not a
failure at the first request (or never noticed, when a cached reply exists). The API key and
credential headers travel only over https, to a loopback host, or with ``allow_insecure``.
:func:`normalise` gives the form that goes into the reply cache key: replies of one server are
never served for another.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import SplitResult, urlsplit

#: The SDK's endpoint when ``base_url`` is null (and ``OPENAI_BASE_URL`` unset).
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: The environment variable the ``openai`` SDK reads when ``base_url`` is null.
BASE_URL_ENV = "OPENAI_BASE_URL"
SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
#: Header names whose values are credentials (sent under the same rule as the API key).
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key", "cookie"})
#: Characters of a bad URL quoted in an error.
SHOWN_CHARS = 80


def _shown(url: str) -> str:
    return repr(url if len(url) <= SHOWN_CHARS else url[:SHOWN_CHARS] + "...")


def parse_base_url(url: object, where: str = "client.base_url") -> SplitResult:
    """``url`` split into parts, or one :class:`ValueError` line saying what is wrong with it."""
    example = "e.g. https://openrouter.ai/api/v1 or http://localhost:8000/v1"
    if not isinstance(url, str) or not url.strip():
        got = repr(url) if isinstance(url, str) else f"{type(url).__name__} {url!r}"
        raise ValueError(f"{where}: must be an http(s) URL ({example}) or null, got {got}")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise ValueError(f"{where}: {_shown(url)} contains spaces or control characters")
    try:
        parts = urlsplit(url)
    except ValueError as err:  # e.g. an unclosed IPv6 bracket
        raise ValueError(f"{where}: {_shown(url)} is not a URL ({err})") from None
    if parts.scheme.lower() not in SCHEMES:
        raise ValueError(f"{where}: {_shown(url)} is not an http(s) URL ({example})")
    if not parts.hostname:
        raise ValueError(f"{where}: {_shown(url)} has no host ({example})")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError:
        raise ValueError(f"{where}: {_shown(url)} has a bad port") from None
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{where}: the URL carries credentials (user:password@); put the key in the environment "
                         "variable named by client.api_key_env")  # fmt: skip
    if parts.fragment:
        raise ValueError(f"{where}: {_shown(url)} has a fragment (#...); remove it")
    return parts


def effective_base_url(base_url: str | None) -> tuple[str, str]:
    """``(url, where)``: the endpoint requests go to (``base_url``, else ``$OPENAI_BASE_URL``, else
    the SDK's default) and the setting that named it (for error messages)."""
    if base_url is not None:
        return base_url, "client.base_url"
    env = os.environ.get(BASE_URL_ENV)
    if env is not None:
        return env, f"the environment variable {BASE_URL_ENV} (client.base_url is null)"
    return DEFAULT_BASE_URL, "client.base_url"


def is_loopback(host: str) -> bool:
    """``localhost``, 127.0.0.0/8 or ::1 (also as an IPv4-mapped address): traffic that never
    leaves the machine. Any other name, however it resolves, is not."""
    h = host.lower()
    if h == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(h)
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return addr.is_loopback or bool(mapped is not None and mapped.is_loopback)


def normalise(url: str) -> str:
    """The URL as it identifies a server: lower-case scheme and host, no default port, no trailing
    slash (``https://API.x.com:443/v1/`` -> ``https://api.x.com/v1``)."""
    p = parse_base_url(url)
    scheme = p.scheme.lower()
    host = p.hostname or ""
    host = f"[{host}]" if ":" in host else host
    port = f":{p.port}" if p.port is not None and p.port != DEFAULT_PORTS[scheme] else ""
    query = f"?{p.query}" if p.query else ""
    return f"{scheme}://{host}{port}{p.path.rstrip('/')}{query}"


def check_secret_transport(url: str, secrets: list[str], allow_insecure: bool, where: str = "client.base_url") -> None:
    """Refuse (one line) to send ``secrets`` (what they are, e.g. "the API key in $X") in clear
    text: plain http to a host that is not loopback, unless ``allow_insecure``."""
    p = urlsplit(url)
    if not secrets or allow_insecure or p.scheme.lower() == "https" or is_loopback(p.hostname or ""):
        return
    raise ValueError(f"{where}: refusing to send {' and '.join(secrets)} in clear text to {normalise(url)} "
                     "(plain http to a non-loopback host); use https, a loopback address, or set "
                     "client.allow_insecure=true to send it anyway")  # fmt: skip
