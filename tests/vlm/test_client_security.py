"""The chat client's security rules (DESIGN.md, Engineering rules):

* an API key (or a credential header) goes only over https, to a loopback host, or with
  ``allow_insecure: true``; otherwise one line, before any connection, in every command that
  takes a client (checked in subprocesses with a socket guard that fails on any lookup/connect);
* ``base_url`` is checked at start;
* the reply cache key holds the endpoint (URL, or the local weights' fingerprint);
* a user-named client factory is checked before it is called (``os:system`` never runs).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from cbm.vlm.client import ChatClient, client_factory, make_client
from cbm.vlm.config import ClientConfig
from cbm.vlm.endpoint import is_loopback, normalise
from cbm.vlm.reply import EndpointUnreachable, Reply

ENV = "CBM_TEST_SECRET_KEY"
KEY = "sk-cbm-test-secret-0123456789"
#: A host name that can never resolve (RFC 6761): nothing can leave the machine for it.
REMOTE = "http://api.example.invalid/v1"
PATH = "/v1/chat/completions"


def completion(text: str) -> dict:
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}  # fmt: skip


@pytest.fixture
def no_network(monkeypatch) -> list:
    """Any name lookup or IP connection in this process fails the test (and is recorded)."""
    attempts: list = []
    real_connect = socket.socket.connect

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise AssertionError(f"network attempt: {args!r}")

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            refuse(address)
        return real_connect(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", connect)
    return attempts


@pytest.fixture
def key(monkeypatch) -> str:
    monkeypatch.setenv(ENV, KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return KEY


def settings(**over) -> dict:
    return {"model": "m", "api_key_env": ENV, "cache_dir": None, "max_retries": 0, **over}


def recording_transport(seen: list) -> httpx2.Client:
    """An httpx client whose transport records each request and answers a completion (no socket)."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json=completion("ok"))

    return httpx2.Client(transport=httpx2.MockTransport(handler))


# --------------------------------------------------------------------------- refused, in-process
@pytest.mark.parametrize("url", [REMOTE, "http://10.0.0.1:8000/v1", "http://127.0.0.1.example.invalid/v1",
                                 "http://localhost.example.invalid/v1", "http://[::ffff:10.0.0.1]/v1", "HTTP://API.EXAMPLE.INVALID/v1"])  # fmt: skip
def test_a_key_over_plain_http_to_a_remote_host_is_refused_before_any_connection(key, no_network, url):
    for build in (lambda: ClientConfig(**settings(base_url=url)), lambda: make_client(**settings(base_url=url)),
                  lambda: ClientConfig.from_mapping(settings(base_url=url))):  # fmt: skip
        with pytest.raises(ValueError, match="refusing to send the API key") as err:
            build()
        msg = str(err.value)
        assert "\n" not in msg and KEY not in msg and f"${ENV}" in msg and "client.allow_insecure=true" in msg
    assert no_network == []


def test_a_credential_header_counts_as_a_secret(monkeypatch, no_network):
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(ValueError, match="refusing to send the 'Authorization' header in clear text"):
        ClientConfig(**settings(base_url=REMOTE, headers={"Authorization": "Bearer x"}))
    ClientConfig(**settings(base_url=REMOTE, headers={"X-Title": "cbm"}))  # not a credential: fine
    cfg = ClientConfig(**settings(base_url="http://127.0.0.1:9/v1", headers={"Authorization": "Bearer x"}))
    assert cfg.public()["headers"] == {"Authorization": "***"}  # never written to records


def test_the_sdk_base_url_variable_is_checked_too(key, monkeypatch, no_network):
    monkeypatch.setenv("OPENAI_BASE_URL", REMOTE)  # the openai SDK's own fallback when base_url is null
    with pytest.raises(ValueError, match=r"^the environment variable OPENAI_BASE_URL \(client.base_url is null\): refusing"):
        make_client(**settings())
    monkeypatch.setenv("OPENAI_BASE_URL", "notaurl")
    with pytest.raises(ValueError, match="OPENAI_BASE_URL.*'notaurl' is not an http"):
        make_client(**settings())
    assert no_network == []


def test_the_backend_checks_again_before_the_sdk_client_exists(monkeypatch, no_network):
    monkeypatch.delenv(ENV, raising=False)
    cfg = ClientConfig(**settings(base_url=REMOTE))  # no key yet: valid (nothing secret to send)
    monkeypatch.setenv(ENV, KEY)  # the key appears later
    with pytest.raises(ValueError, match="refusing to send the API key"):
        ChatClient(cfg)
    assert no_network == []


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("notaurl", "'notaurl' is not an http(s) URL"),
        ("ftp://files.example/v1", "is not an http(s) URL"),
        ("http://", "has no host"),
        ("https:///v1", "has no host"),
        ("http://exa mple.com/v1", "contains spaces or control characters"),
        ("http://a\x00b/v1", "contains spaces or control characters"),
        ("http://a.example:99999/v1", "has a bad port"),
        ("http://[::1/v1", "is not a URL"),
        ("https://user:pw@a.example/v1", "the URL carries credentials"),
        ("", "must be an http(s) URL"),
    ],
)
def test_a_bad_base_url_is_one_line_at_start(no_network, url, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)")) as err:
        make_client(**settings(base_url=url))
    assert "\n" not in str(err.value) and str(err.value).startswith("client.base_url: ")
    assert no_network == []


def test_a_bad_base_url_is_noticed_even_with_a_cached_reply(tmp_path, httpserver):
    httpserver.expect_request(PATH).respond_with_json(completion("cached"))
    c = make_client(**settings(base_url=httpserver.url_for("/v1"), cache_dir=str(tmp_path)))
    assert c.chat(c.messages("q")).text == "cached"
    with pytest.raises(ValueError, match="'notaurl' is not an http"):
        make_client(**settings(base_url="notaurl", cache_dir=str(tmp_path)))


# ---------------------------------------------------------------------------------- allowed cases
def test_loopback_http_gets_the_key(key, httpserver):
    httpserver.expect_request(PATH).respond_with_json(completion("ok"))
    port = httpserver.port
    for url in (httpserver.url_for("/v1"), f"http://127.0.0.1:{port}/v1", f"http://LocalHost:{port}/v1/"):
        c = make_client(**settings(base_url=url))
        assert c.chat(c.messages("q")).text == "ok"
    assert [req.headers["Authorization"] for req, _ in httpserver.log] == [f"Bearer {KEY}"] * 3


PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD")


@pytest.fixture
def proxy_env(monkeypatch):
    """Sets proxy variables (the rest cleared); returns the setter."""
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)

    def set_env(**values):
        for var in PROXY_VARS:
            monkeypatch.delenv(var, raising=False)
        for var, value in values.items():
            monkeypatch.setenv(var, value)

    return set_env


def test_a_proxy_in_the_environment_makes_loopback_http_unsafe(key, httpserver, proxy_env, monkeypatch, no_network):
    """With ``HTTP_PROXY`` set, the SDK's httpx client sends a plain-http request, Authorization
    header included, in clear to the proxy: the key is refused unless the host is in NO_PROXY
    or ``allow_insecure`` is set."""
    from cbm.vlm.editors.hosted import HostedImageEditor

    url = f"http://localhost:{httpserver.port}/v1"
    proxy_env(HTTP_PROXY="http://user:pw@proxy.example.invalid:3128")
    for build in (lambda: ClientConfig(**settings(base_url=url)), lambda: make_client(**settings(base_url=url))):
        with pytest.raises(ValueError, match="^client.base_url: refusing to send the API key in") as err:
            build()
        msg = str(err.value)
        assert "\n" not in msg and KEY not in msg and "through the proxy http://proxy.example.invalid:3128" in msg
        assert "NO_PROXY" in msg and "client.allow_insecure=true" in msg and "pw" not in msg  # the proxy's password is not shown
    with pytest.raises(ValueError, match="^editor.base_url: refusing .* through the proxy .*editor.allow_insecure=true"):
        HostedImageEditor.check_settings({"base_url": url, "api_key_env": ENV})
    assert ClientConfig(**settings(base_url=url, allow_insecure=True)).allow_insecure  # the explicit opt-in
    ClientConfig(**settings(base_url=url.replace("http:", "https:")))  # https through a proxy is a tunnel: fine
    monkeypatch.delenv(ENV)
    ClientConfig(**settings(base_url=url))  # no secret: nothing to refuse
    monkeypatch.setenv(ENV, KEY)
    for env in ({"http_proxy": "proxy.example.invalid:3128"}, {"ALL_PROXY": "socks5://proxy.example.invalid:1080"},
                {"HTTP_PROXY": "http://p.example.invalid", "NO_PROXY": "example.com,localhost:1"}):  # fmt: skip
        proxy_env(**env)
        with pytest.raises(ValueError, match="through the proxy"):
            ClientConfig(**settings(base_url=url))
    for env in ({"HTTP_PROXY": "http://p.example.invalid", "NO_PROXY": "localhost"}, {"HTTP_PROXY": "http://p.example.invalid", "no_proxy": "*"},
                {"HTTP_PROXY": "http://p.example.invalid", "NO_PROXY": f"example.com, localhost:{httpserver.port}"},
                {"HTTPS_PROXY": "http://p.example.invalid"}):  # fmt: skip
        proxy_env(**env)
        ClientConfig(**settings(base_url=url))
    assert no_network == []


@pytest.mark.parametrize(
    ("url", "no_proxy", "proxied"),
    [("http://localhost:8000/v1", "", True), ("http://localhost:8000/v1", "localhost", False),
     ("http://127.0.0.1:8000/v1", "localhost", True), ("http://127.0.0.1:8000/v1", "127.0.0.1", False),
     ("http://[::1]:8000/v1", "::1", False), ("http://127.0.0.1/v1", "127.0.0.1:80", True),
     ("http://localhost:8000/v1", "localhost:8001", True), ("http://localhost:8000/v1", "http://localhost", False),
     ("http://localhost:8000/v1", "https://localhost", True), ("http://a.example.com/v1", "example.com", False),
     ("http://example.com/v1", ".example.com", True), ("http://a.example.com/v1", ".example.com", False),
     ("http://badexample.com/v1", "example.com", True), ("http://localhost/v1", " *", False)],
)  # fmt: skip
def test_the_proxy_rules_are_httpx_s(proxy_env, url, no_proxy, proxied):
    """:func:`proxy_for` against httpx's own choice for the same environment."""
    from cbm.vlm.endpoint import proxy_for

    proxy_env(HTTP_PROXY="http://p.example.invalid:3128", NO_PROXY=no_proxy)
    assert (proxy_for(url) is not None) is proxied
    mounts = httpx2.Client(trust_env=True)._mounts  # pattern -> transport (None: direct), most specific first
    chosen = next((t for pattern, t in mounts.items() if pattern.matches(httpx2.URL(url))), None)
    assert (chosen is not None) is proxied


def test_the_sdk_really_goes_through_the_proxy_httpx_reads(key, httpserver, proxy_env):
    """What the check guards against: an allowed-insecure request to a loopback server goes to the
    proxy (here a closed port: a transport error), and directly once NO_PROXY names the host."""
    httpserver.expect_request(PATH).respond_with_json(completion("direct"))
    url = f"http://localhost:{httpserver.port}/v1"
    proxy_env(HTTP_PROXY="http://127.0.0.1:9")
    c = make_client(**settings(base_url=url, allow_insecure=True))
    with pytest.raises(EndpointUnreachable) as err:  # refused before any answer: the run stops, naming the URL and the proxy
        c.chat(c.messages("q"))
    assert f"cannot connect to {url} through the proxy http://127.0.0.1:9: connection refused" in str(err.value) and len(httpserver.log) == 0
    proxy_env(HTTP_PROXY="http://127.0.0.1:9", NO_PROXY="localhost")
    c = make_client(**settings(base_url=url))
    assert c.chat(c.messages("q")).text == "direct" and httpserver.log[0][0].headers["Authorization"] == f"Bearer {KEY}"


def test_https_gets_the_key(key, no_network):
    seen: list = []
    c = ChatClient(ClientConfig(**settings(base_url="https://api.example.invalid/v1")), http_client=recording_transport(seen))
    assert c.chat(c.messages("q")).text == "ok"
    (req,) = seen
    assert str(req.url) == "https://api.example.invalid/v1/chat/completions" and req.headers["Authorization"] == f"Bearer {KEY}"
    assert no_network == []


def test_no_key_over_plain_http_sends_only_the_placeholder(monkeypatch, no_network):
    monkeypatch.delenv(ENV, raising=False)
    seen: list = []
    c = ChatClient(ClientConfig(**settings(base_url=REMOTE)), http_client=recording_transport(seen))
    assert c.chat(c.messages("q")).text == "ok"
    assert seen[0].headers["Authorization"] == "Bearer not-needed"  # no secret travels


def own_address() -> str | None:
    """This machine's non-loopback IPv4 address (a UDP connect sends no packet), or ``None``."""
    candidates = []
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the outgoing interface
            candidates.append(s.getsockname()[0])
    except OSError:
        pass
    try:
        candidates.append(socket.gethostbyname(socket.gethostname()))
    except OSError:
        pass
    return next((a for a in candidates if a and not is_loopback(a) and a != "0.0.0.0"), None)


def test_allow_insecure_sends_the_key_to_a_non_loopback_address(key):
    from pytest_httpserver import HTTPServer

    ip = own_address()
    if ip is None:
        pytest.skip("this machine has no non-loopback address")
    server = HTTPServer(host=ip, port=0)
    try:
        server.start()
    except OSError as err:
        pytest.skip(f"cannot listen on {ip}: {err}")
    try:
        server.expect_request(PATH).respond_with_json(completion("ok"))
        url = f"http://{ip}:{server.port}/v1"
        with pytest.raises(ValueError, match="refusing to send the API key"):
            make_client(**settings(base_url=url))
        c = make_client(**settings(base_url=url, allow_insecure=True))
        assert c.chat(c.messages("q")).text == "ok"
        (req, _), = server.log
        assert req.headers["Authorization"] == f"Bearer {KEY}"
    finally:
        server.clear()
        server.stop()


# ---------------------------------------------------------------------------------------- cache
def test_two_endpoints_with_one_model_name_do_not_share_replies(tmp_path, httpserver):
    from pytest_httpserver import HTTPServer

    other = HTTPServer(host="127.0.0.1", port=0)
    other.start()
    try:
        httpserver.expect_request(PATH).respond_with_json(completion("from A"))
        other.expect_request(PATH).respond_with_json(completion("from B"))
        a = make_client(**settings(base_url=f"http://localhost:{httpserver.port}/v1", cache_dir=str(tmp_path)))
        b = make_client(**settings(base_url=f"http://127.0.0.1:{other.port}/v1", cache_dir=str(tmp_path)))
        assert a.chat(a.messages("q")).text == "from A"
        reply = b.chat(b.messages("q"))
        assert reply.text == "from B" and not reply.cached and len(other.log) == 1
        same = make_client(**settings(base_url=f"HTTP://LOCALHOST:{httpserver.port}/v1/", cache_dir=str(tmp_path)))
        assert same.chat(same.messages("q")).text == "from A" and len(httpserver.log) == 1  # normalised URL: a hit
        with socket.socket() as s:  # a port nobody listens on: the endpoint is dead
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]
        gone = make_client(**settings(base_url=f"http://127.0.0.1:{dead}/v1", cache_dir=str(tmp_path)))
        with pytest.raises(EndpointUnreachable, match=f"cannot connect to http://127.0.0.1:{dead}/v1: connection refused"):
            gone.try_chat(gone.messages("q"))  # never the other server's reply
    finally:
        other.clear()
        other.stop()


def test_normalise_identifies_a_server():
    assert normalise("HTTPS://API.Example.com:443/v1/") == "https://api.example.com/v1"
    assert normalise("http://localhost:80/v1") == "http://localhost/v1"
    assert normalise("http://[::1]:8000/v1") == "http://[::1]:8000/v1"
    assert normalise("https://a.example/v1") != normalise("https://b.example/v1")


class Scripted:
    """A backend answering a fixed text (stands in for a local model)."""

    def __init__(self, text: str):
        self.text, self.model, self.calls = text, "local", 0

    def complete(self, messages, params) -> Reply:
        self.calls += 1
        return Reply(text=self.text, model=self.model)


def test_changed_local_weights_do_not_get_the_old_reply(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"A" * 4096)
    cfg = ClientConfig(backend="local", model=str(model), cache_dir=str(tmp_path / "replies"))
    first = ChatClient(cfg, backend=Scripted("old model"))
    assert first.chat(first.messages("q")).text == "old model"
    again = ChatClient(cfg, backend=Scripted("unused"))
    assert again.chat(again.messages("q")).text == "old model" and again.backend.calls == 0  # same weights: a hit
    os.utime(model / "model.safetensors", ns=(1, 1))  # touched, same bytes: still the same model
    touched = ChatClient(cfg, backend=Scripted("unused"))
    assert touched.chat(touched.messages("q")).text == "old model" and touched.endpoint == first.endpoint
    (model / "model.safetensors").write_bytes(b"B" * 4096)  # fine-tuned and re-saved: same name, same size
    tuned = ChatClient(cfg, backend=Scripted("new model"))
    reply = tuned.chat(tuned.messages("q"))
    assert reply.text == "new model" and not reply.cached and tuned.endpoint != first.endpoint
    memo = next((tmp_path / "replies" / "fingerprints").glob("*.json"))
    memo.write_text('{"files": {"model.safetensors": [1, 2, 3, 4, 5, "forged"]}, "digest": "x"}')  # a corrupt memo is ignored
    assert ChatClient(cfg, backend=Scripted("unused")).endpoint == tuned.endpoint


# --------------------------------------------------------------------------- client factories
def test_a_plain_function_is_never_called_as_a_client(monkeypatch, tmp_path):
    from cbm.interventions.interveners.llm import load_client

    calls: list = []
    monkeypatch.setattr(os, "system", lambda *a, **k: calls.append(a) or 0)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(subprocess, "Popen", type("Popen", (), {"__init__": lambda self, *a, **k: calls.append(a)}))
    for spec, kwargs in [("os:system", {"command": f"touch {tmp_path}/PWNED"}), ("builtins:eval", {"source": "1"}),
                         ("subprocess:run", {"args": ["true"]}), ("subprocess:Popen", {"args": ["true"]}),
                         ("shutil:rmtree", {"path": str(tmp_path)}), ("cbm.vlm.config:ClientConfig", {"model": "m"})]:  # fmt: skip
        with pytest.raises(ValueError, match=f"^llm.client: '{spec}' is a \\w+, not a client factory") as err:
            load_client(spec, kwargs)
        assert "\n" not in str(err.value) and str(err.value).endswith("; it was not called")
    assert calls == [] and not (tmp_path / "PWNED").exists() and tmp_path.exists()


FACTORIES = '''
from cbm.vlm.client import ChatClient, client_factory


class Echo:
    def __init__(self, prefix):
        self.prefix = prefix

    def ask(self, prompt, image=None):
        return self.prefix + prompt


@client_factory
def marked(prefix="> "):
    return Echo(prefix)


def unmarked(prefix="> "):
    return Echo(prefix)


class MyClient(ChatClient):
    pass


class Liar:
    """An object claiming every attribute (a mark it does not carry)."""
    def __getattr__(self, name):
        return True
    def __call__(self, **kw):
        raise AssertionError("called")


liar = Liar()
'''


def test_only_marked_factories_and_chat_clients_are_called(tmp_path, monkeypatch):
    from cbm.interventions.interveners.llm import load_client

    (tmp_path / "my_clients.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_clients", raising=False)
    assert load_client("my_clients:marked", {"prefix": "# "}).ask("hi") == "# hi"
    built = load_client("my_clients:MyClient", {"model": "m", "base_url": "http://127.0.0.1:9/v1", "cache_dir": None})
    assert type(built).__name__ == "MyClient" and built.cfg.base_url == "http://127.0.0.1:9/v1"
    assert isinstance(load_client("cbm.vlm.client:make_client", {"model": "m", "base_url": "http://127.0.0.1:9/v1"}), ChatClient)
    for spec in ("my_clients:unmarked", "my_clients:Echo", "my_clients:liar", "my_clients:Liar"):
        with pytest.raises(ValueError, match="not a client factory"):
            load_client(spec, {})
    with pytest.raises(ValueError, match=r"llm.client_kwargs: client: unknown setting\(s\) \['command'\]"):
        load_client("my_clients:MyClient", {"command": "x"})
    assert client_factory(lambda: None).__cbm_client_factory__ is True


def test_the_llm_intervener_config_checks_its_client_before_any_model_loads(key):
    from cbm.core.validation import ConfigError
    from cbm.interventions import registry

    with pytest.raises(ConfigError, match="intervener.llm: llm.client: 'os:system' is a builtin_function_or_method, not a client factory"):
        registry.validate("intervener", "llm", {"client": "os:system", "client_kwargs": {"command": "true"}})
    with pytest.raises(ConfigError, match="llm.client_kwargs: client.base_url: refusing to send the API key"):
        registry.validate("intervener", "llm", {"client": "cbm.vlm.client:make_client",
                                                "client_kwargs": settings(base_url=REMOTE)})  # fmt: skip
    ok = registry.validate("intervener", "llm", {"client": "cbm.vlm.client:make_client", "client_kwargs": settings(base_url="https://a.example/v1")})
    assert ok.client == "cbm.vlm.client:make_client"


# ------------------------------------------------------------------- every command, subprocess
#: ``sitecustomize`` that kills a subprocess on any name lookup or IP connection.
GUARD = Path(__file__).parents[1] / "netguard"
KWARGS = f"{{model:m,base_url:'{REMOTE}',api_key_env:{ENV}}}"
COMMANDS = [
    ("cbm-edct", [f"vlm.base_url={REMOTE}", f"vlm.api_key_env={ENV}"], "vlm: client.base_url"),
    ("cbm-edct", [f"llm.base_url={REMOTE}", f"llm.api_key_env={ENV}"], "llm: client.base_url"),
    ("cbm-edct", [f"judge.base_url={REMOTE}", f"judge.api_key_env={ENV}"], "judge: client.base_url"),
    ("cbm-edct", [f"+judge2={KWARGS}"], "judge2: client.base_url"),
    ("cbm-icl", [f"models.vlm.base_url={REMOTE}", f"models.vlm.api_key_env={ENV}"], "models.vlm: client.base_url"),
    ("cbm-icl", [f"judge.base_url={REMOTE}", f"judge.api_key_env={ENV}"], "judge: client.base_url"),
    ("cbm-concepts", ["extract", "out=x.yaml", f"client.base_url={REMOTE}", f"client.api_key_env={ENV}"], "client.base_url"),
    ("cbm-intervene", ["checkpoint=run", "intervener=[llm]", "intervener.llm.client=cbm.vlm.client:make_client",
                       f"++intervener.llm.client_kwargs={KWARGS}"], "llm.client_kwargs: client.base_url"),  # fmt: skip
]


@pytest.mark.parametrize(("prog", "args", "where"), COMMANDS, ids=[f"{p}:{a[0] if p != 'cbm-concepts' else a[2]}" for p, a, _ in COMMANDS])
def test_every_command_refuses_a_key_for_plain_http_before_any_connection(tmp_path, prog, args, where):
    work = tmp_path / "work"
    (work / "run" / "checkpoints").mkdir(parents=True)
    (work / "run" / "checkpoints" / "best.ckpt").write_bytes(b"")  # never read: the refusal comes first
    before = sorted(p for p in work.rglob("*"))
    env = {**os.environ, ENV: KEY, "OPENAI_API_KEY": KEY, "PYTHONPATH": os.pathsep.join(p for p in (str(GUARD), os.environ.get("PYTHONPATH", "")) if p),
           "CBM_CACHE_DIR": str(tmp_path / "cache"), "PYTHONWARNINGS": "ignore"}  # fmt: skip
    env.pop("CBM_DEBUG", None)
    res = subprocess.run([str(Path(sys.executable).parent / prog), *args], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), res.stderr[-2000:]
    assert f"{where}: refusing to send the API key in ${ENV}" in lines[0] and "client.allow_insecure=true" in lines[0]
    assert "NETWORK ATTEMPT" not in res.stderr and KEY not in res.stderr + res.stdout
    assert sorted(p for p in work.rglob("*")) == before
