"""Where a hosted client's requests go, and whether its secrets may go there.

A base URL is checked when the settings are read (an ``http``/``https`` URL with a host, no
spaces or control characters, no credentials in it), so a typo is one line at start, not a
failure at the first request (or never noticed, when a cached reply exists). The API key and
credential headers travel only over https, to a loopback host that is reached directly (not
through a proxy named in the environment), or with ``allow_insecure``. :func:`check_endpoint` is
that whole check for a hosted endpoint (the chat client's and the image editor's).
:func:`normalise` gives the form that goes into the reply cache key: replies of one server are
never served for another.
"""

from __future__ import annotations

import ipaddress
import os
import urllib.request
from collections.abc import Iterable
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


def effective_base_url(base_url: str | None, scope: str = "client") -> tuple[str, str]:
    """``(url, where)``: the endpoint requests go to (``base_url``, else ``$OPENAI_BASE_URL``, else
    the SDK's default) and the setting that named it (for error messages; ``scope``: the settings'
    name, ``client`` or ``editor``)."""
    if base_url is not None:
        return base_url, f"{scope}.base_url"
    env = os.environ.get(BASE_URL_ENV)
    if env is not None:
        return env, f"the environment variable {BASE_URL_ENV} ({scope}.base_url is null)"
    return DEFAULT_BASE_URL, f"{scope}.base_url"


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


def _no_proxy_pattern(entry: str) -> str:
    """One ``NO_PROXY`` entry as the URL pattern httpx makes of it (``example.com`` ->
    ``all://*example.com``: the domain and its subdomains; ``.example.com``: subdomains only)."""
    if "://" in entry:
        return entry
    for kind, form in ((ipaddress.IPv4Address, "all://{}"), (ipaddress.IPv6Address, "all://[{}]")):
        try:
            kind(entry.split("/")[0])
            return form.format(entry)
        except ValueError:
            pass
    return f"all://{entry}" if entry.lower() == "localhost" else f"all://*{entry}"


def _host_matches(pattern: str, host: str) -> bool:
    if pattern in ("", "*"):
        return True
    if pattern.startswith("*."):
        return len(host) > len(pattern) - 1 and host.endswith(pattern[1:])
    if pattern.startswith("*"):
        return host == pattern[1:] or host.endswith("." + pattern[1:])
    return host == pattern


def _bypassed(entries: Iterable[str], scheme: str, host: str, port: int | None) -> bool:
    """Whether a ``NO_PROXY`` entry covers ``scheme://host:port`` (httpx's rules)."""
    for entry in entries:
        if entry == "*":
            return True
        if not entry:
            continue
        try:
            pat = urlsplit(_no_proxy_pattern(entry))
            pat_port = pat.port
        except ValueError:  # an entry httpx could not parse either: it bypasses nothing
            continue
        if pat.scheme.lower() not in ("all", scheme) or not _host_matches((pat.hostname or "").lower(), host):
            continue
        if pat_port is None or pat_port == port:
            return True
    return False


def proxy_for(url: str) -> str | None:
    """The proxy a request to ``url`` goes through when the HTTP client reads the environment (as
    the ``openai`` SDK's httpx client does): ``http_proxy`` / ``https_proxy`` by the URL's scheme,
    else ``all_proxy`` (either case, as :func:`urllib.request.getproxies` reads them), unless a
    ``no_proxy`` entry covers the host (httpx's rules: ``*``, a domain and its subdomains,
    ``.domain``: subdomains only, an IP address, ``localhost``, an optional ``:port``). ``None``:
    sent directly."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    port = None if port == DEFAULT_PORTS.get(scheme) else port
    env = urllib.request.getproxies()
    proxy = env.get(scheme) or env.get("all")
    if not proxy or _bypassed((e.strip() for e in env.get("no", "").split(",")), scheme, host, port):
        return None
    return proxy


def _proxy_shown(proxy: str) -> str:
    """The proxy's scheme, host and port (never a ``user:password@`` it carries)."""
    try:
        p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host = p.hostname or "?"
        return f"{p.scheme}://{f'[{host}]' if ':' in host else host}{f':{p.port}' if p.port else ''}"
    except ValueError:
        return "(unparsable)"


def check_secret_transport(url: str, secrets: list[str], allow_insecure: bool, where: str = "client.base_url",
                           scope: str = "client") -> None:  # fmt: skip
    """Refuse (one line) to send ``secrets`` (what they are, e.g. "the API key in $X") in clear
    text: plain http to a host that is not loopback, or to a loopback host through a proxy the
    environment names (the proxy reads the request, headers and all), unless ``allow_insecure``
    (``scope``: the settings that hold it, ``client`` or ``editor``)."""
    p = urlsplit(url)
    if not secrets or allow_insecure or p.scheme.lower() == "https":
        return
    opt_in = f"set {scope}.allow_insecure=true to send it anyway"
    what = " and ".join(secrets)
    if not is_loopback(p.hostname or ""):
        raise ValueError(f"{where}: refusing to send {what} in clear text to {normalise(url)} "
                         f"(plain http to a non-loopback host); use https, a loopback address, or {opt_in}")  # fmt: skip
    proxy = proxy_for(url)
    if proxy is not None:
        raise ValueError(f"{where}: refusing to send {what} in clear text to {normalise(url)} through the proxy "
                         f"{_proxy_shown(proxy)} named by the environment (http_proxy / all_proxy); add the host to "
                         f"NO_PROXY, use https, or {opt_in}")  # fmt: skip


def check_endpoint(base_url: str | None, api_key_env: str, headers: Iterable[str] = (), allow_insecure: bool = False,
                   scope: str = "client", purpose: str = "the API key for") -> str | None:  # fmt: skip
    """A hosted endpoint's checks, before any connection, one line each: a valid URL (``base_url``,
    else ``$OPENAI_BASE_URL``, else the SDK's default); a key in ``$api_key_env`` for a hosted https
    endpoint; no key or credential header (of ``headers``' names) in clear text
    (:func:`check_secret_transport`). Returns the key (``None``: none set, a local server). Callers
    run it again right before building the SDK client, as the environment may have changed."""
    url, where = effective_base_url(base_url, scope)
    parts = parse_base_url(url, where)
    key = os.environ.get(api_key_env) or None
    secrets = [f"the API key in ${api_key_env}"] if key else []
    secrets += [f"the '{h}' header" for h in headers if h.lower() in CREDENTIAL_HEADERS]
    check_secret_transport(url, secrets, allow_insecure, where, scope)
    if not key and parts.scheme.lower() == "https" and not is_loopback(parts.hostname or ""):
        raise ValueError(f"{scope}: the environment variable {api_key_env} is not set ({purpose} {normalise(url)}); "
                         f"set it, or point {scope}.base_url at a local endpoint")  # fmt: skip
    return key
