"""The chat client against a real HTTP server on loopback speaking the chat-completions protocol
(pytest-httpserver) and against mocked transports: images, sampling parameters, retries with
Retry-After, timeouts, malformed replies, the cache (no second request), resume, concurrency,
accounting; and the local backend generating with a tiny random VLM built from a config."""

from __future__ import annotations

import json
import threading
import time

import httpx2
import numpy as np
import pytest
from handshake import wait_for
from werkzeug import Response

from cbm.vlm.client import ChatClient, make_client
from cbm.vlm.config import ClientConfig
from cbm.vlm.messages import DATA_URL_PREFIX, decode_image_part
from cbm.vlm.reply import ChatError

PATH = "/v1/chat/completions"


def completion(text: str, prompt_tokens: int = 10, completion_tokens: int = 5, reasoning: str | None = None) -> dict:
    msg = {"role": "assistant", "content": text}
    if reasoning is not None:
        msg["reasoning"] = reasoning
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}}  # fmt: skip


def client_for(server, tmp_path, sleeps: list | None = None, **over) -> ChatClient:
    settings = dict(backend="openai", model="m", base_url=server.url_for("/v1"), cache_dir=str(tmp_path / "cache"), max_retries=3, backoff_s=0.0)
    settings.update(over)
    return ChatClient(ClientConfig(**settings), sleep=(sleeps.append if sleeps is not None else lambda s: None))


def test_request_carries_image_params_and_headers(httpserver, tmp_path, monkeypatch):
    monkeypatch.setenv("CBM_TEST_KEY", "sk-test")
    httpserver.expect_request(PATH, method="POST").respond_with_json(completion("<answer>yes</answer>", reasoning="thought"))
    c = client_for(httpserver, tmp_path, api_key_env="CBM_TEST_KEY", headers={"X-Title": "cbm"}, reasoning_effort="low", max_tokens=64, system="Be brief.")
    img = np.zeros((8, 6, 3), np.uint8)
    img[2, 3] = (255, 0, 0)
    reply = c.chat(c.messages("Is there a red pixel?", [img]))
    assert reply.text == "<answer>yes</answer>" and reply.reasoning == "thought"
    assert (reply.prompt_tokens, reply.completion_tokens, reply.cached) == (10, 5, False)
    (req, _), = httpserver.log
    body = json.loads(req.data)
    assert req.headers["Authorization"] == "Bearer sk-test" and req.headers["X-Title"] == "cbm"
    assert body["model"] == "m" and body["temperature"] == 0.0 and body["max_tokens"] == 64 and body["reasoning_effort"] == "low"
    system, user = body["messages"]
    assert system == {"role": "system", "content": "Be brief."}
    image, text = user["content"]
    assert text == {"type": "text", "text": "Is there a red pixel?"}
    assert image["image_url"]["url"].startswith(DATA_URL_PREFIX)
    np.testing.assert_array_equal(np.asarray(decode_image_part(image)), img)  # lossless: exact pixels travel


def test_retries_429_and_500_honouring_retry_after(httpserver, tmp_path):
    answers = [Response("slow down", status=429, headers={"Retry-After": "7"}), Response("oops", status=500),
               Response(json.dumps(completion("ok")), status=200, content_type="application/json")]  # fmt: skip
    httpserver.expect_request(PATH).respond_with_handler(lambda req: answers.pop(0))
    sleeps: list[float] = []
    c = client_for(httpserver, tmp_path, sleeps, backoff_s=0.25, max_wait_s=60)
    assert c.chat(c.messages("hi")).text == "ok"
    assert len(httpserver.log) == 3 and c.usage.retries == 2
    assert sleeps[0] == 7.0  # the server's Retry-After, not the backoff
    assert 0.125 <= sleeps[1] <= 0.5  # backoff 0.25 * 2**1 with jitter in [0.5, 1]


def test_retry_after_is_capped_and_attempts_bounded(httpserver, tmp_path):
    httpserver.expect_request(PATH).respond_with_response(Response("busy", status=503, headers={"Retry-After": "3600"}))
    sleeps: list[float] = []
    c = client_for(httpserver, tmp_path, sleeps, max_retries=2, max_wait_s=5)
    with pytest.raises(ChatError) as e:
        c.chat(c.messages("hi"))
    assert e.value.kind == "http" and e.value.status == 503 and e.value.attempts == 3
    assert sleeps == [5.0, 5.0] and len(httpserver.log) == 3
    assert c.usage.failures == {"http": 1}
    assert "\n" not in str(e.value)


def test_client_errors_are_not_retried(httpserver, tmp_path):
    httpserver.expect_request(PATH).respond_with_json({"error": {"message": "bad model"}}, status=400)
    c = client_for(httpserver, tmp_path)
    with pytest.raises(ChatError, match="HTTP 400") as e:
        c.chat(c.messages("hi"))
    assert e.value.attempts == 1 and len(httpserver.log) == 1


def test_timeout_is_retried_then_reported(httpserver, tmp_path):
    release = threading.Event()

    def slow(req):  # answers only once the test has seen the client give up
        release.wait(60)
        return Response(json.dumps(completion("late")), content_type="application/json")

    httpserver.expect_request(PATH).respond_with_handler(slow)
    c = client_for(httpserver, tmp_path, timeout_s=0.15, max_retries=1)
    t0 = time.perf_counter()
    with pytest.raises(ChatError) as e:
        c.chat(c.messages("hi"))
    assert e.value.kind == "timeout" and e.value.attempts == 2
    assert time.perf_counter() - t0 < 2.5
    assert c.usage.failures == {"timeout": 1} and c.usage.retries == 1
    release.set()  # the server answers the abandoned requests now
    wait_for(lambda: len(httpserver.log) == 2, 30, "the server to log both requests")


@pytest.fixture
def no_proxy(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refused_connection_before_any_answer_stops_the_run_in_one_line(tmp_path, no_proxy):
    """Nothing listens at the base URL: after its retries (recorded here, never slept) the client
    raises EndpointUnreachable, a user error (OSError: exit 2, one line naming the URL), from chat,
    try_chat and map alike: a run stops instead of recording the same failure per request."""
    from cbm.core.common import USER_ERRORS, one_line
    from cbm.vlm.reply import EndpointUnreachable

    url = f"http://127.0.0.1:{closed_port()}/v1"
    sleeps: list[float] = []
    c = ChatClient(ClientConfig(backend="openai", model="m", base_url=url, cache_dir=None, max_retries=2, backoff_s=30.0), sleep=sleeps.append)
    with pytest.raises(EndpointUnreachable) as e:
        c.chat(c.messages("hi"))
    assert one_line(e.value) == str(e.value) == (f"client.base_url: cannot connect to {url}: connection refused after 3 attempts "
                                                 "(no server listens there; is it running, and is the URL right?)")  # fmt: skip
    assert isinstance(e.value, USER_ERRORS) and not isinstance(e.value, ChatError)
    assert len(sleeps) == 2 and c.usage.retries == 2 and c.usage.failures == {"transport": 1}
    c = ChatClient(ClientConfig(backend="openai", model="m", base_url=url, cache_dir=None, max_retries=0), sleep=sleeps.append)
    with pytest.raises(EndpointUnreachable, match="connection refused [(]"):
        c.try_chat(c.messages("hi"))
    with pytest.raises(EndpointUnreachable):
        c.map([c.messages("a"), c.messages("b"), c.messages("c")], progress=False)


def test_a_refused_connection_after_an_answer_is_a_recorded_request_failure():
    """Once the endpoint has answered, a refused connection is that request's failure (a server that
    went away mid-run): a ChatError as any other, the sweep goes on."""
    from cbm.vlm.reply import Reply

    class Backend:
        model = "m"

        def __init__(self):
            self.calls = 0

        def complete(self, messages, params):
            self.calls += 1
            if self.calls == 1:
                return Reply(text="<answer>yes</answer>", model="m")
            raise ChatError("transport", "cannot reach the endpoint ([Errno 111] Connection refused)", refused=True)

    c = ChatClient(ClientConfig(backend="openai", model="m", base_url="http://127.0.0.1:9/v1", cache_dir=None, max_retries=1),
                   backend=Backend(), sleep=lambda s: None)  # fmt: skip
    assert c.chat(c.messages("a")).text == "<answer>yes</answer>"
    out = c.try_chat(c.messages("b"))
    assert isinstance(out, ChatError) and out.kind == "transport" and out.refused and out.attempts == 2


@pytest.mark.parametrize("body", ["this is not json", json.dumps({"id": "x", "choices": []}), json.dumps(completion("x") | {"choices": [{"index": 0, "message": {"role": "assistant", "content": None}}]})])
def test_malformed_replies_are_recorded_errors(httpserver, tmp_path, body):
    httpserver.expect_request(PATH).respond_with_data(body, content_type="application/json")
    c = client_for(httpserver, tmp_path)
    out = c.try_chat(c.messages("hi"))
    assert isinstance(out, ChatError) and out.kind == "malformed"
    assert len(httpserver.log) == 1  # a server that answers garbage is not asked again
    assert c.usage.failures == {"malformed": 1}
    assert not list((tmp_path / "cache").rglob("*.json"))  # errors are never cached


def test_cache_hit_on_rerun_sends_no_request(httpserver, tmp_path):
    httpserver.expect_request(PATH).respond_with_json(completion("cached answer"))
    first = client_for(httpserver, tmp_path)
    assert first.chat(first.messages("q")).text == "cached answer"
    again = client_for(httpserver, tmp_path)  # a new process: only the disk is shared
    reply = again.chat(again.messages("q"))
    assert reply.text == "cached answer" and reply.cached and len(httpserver.log) == 1
    assert again.usage.to_json()["requests"] == 0 and again.usage.cache_hits == 1
    assert again.chat(again.messages("q"), temperature=0.7).text == "cached answer" and len(httpserver.log) == 2  # other params: new key


def test_an_edited_cache_entry_is_a_miss_and_is_requested_again(httpserver, tmp_path, caplog):
    httpserver.expect_request(PATH).respond_with_json(completion("the server's answer"))
    first = client_for(httpserver, tmp_path)
    first.chat(first.messages("q"))
    (entry,) = (tmp_path / "cache").rglob("*.json")
    saved = json.loads(entry.read_text())
    assert isinstance(saved.get("sha256"), str) and saved["reply"]["text"] == "the server's answer"  # sealed
    saved["reply"]["text"] = "an answer someone typed in"
    entry.write_text(json.dumps(saved))
    with caplog.at_level("WARNING", logger="cbm.vlm"):
        again = client_for(httpserver, tmp_path)
        reply = again.chat(again.messages("q"))
        assert reply.text == "the server's answer" and not reply.cached and len(httpserver.log) == 2
    warned = [r.getMessage() for r in caplog.records if "reply cache" in r.getMessage()]
    assert len(warned) == 1 and "changed since it was written" in warned[0]
    third = client_for(httpserver, tmp_path)  # the rewritten entry serves again
    assert third.chat(third.messages("q")).cached and len(httpserver.log) == 2


@pytest.mark.parametrize(
    "garbage",
    [b"", b"\xff\xfe", b"[1, 2]", b"{\"reply\": 5", b"null", b"{\"key\": 1, \"sha256\": 2}",
     "resealed reply of the wrong shape", "resealed reply with a NaN latency"],
)  # fmt: skip
def test_a_garbage_cache_entry_is_a_miss_not_a_crash(httpserver, tmp_path, garbage):
    from cbm.vlm.sealed import seal

    httpserver.expect_request(PATH).respond_with_json(completion("fresh"))
    first = client_for(httpserver, tmp_path)
    first.chat(first.messages("q"))
    (entry,) = (tmp_path / "cache").rglob("*.json")
    body = {k: v for k, v in json.loads(entry.read_text()).items() if k != "sha256"}
    if garbage == "resealed reply of the wrong shape":  # a digest recomputed by hand: the shape is still checked
        garbage = json.dumps(seal({**body, "reply": {"text": ["not", "text"], "model": "m", "prompt_tokens": "many"}})).encode()
    elif garbage == "resealed reply with a NaN latency":
        garbage = json.dumps(seal({**body, "reply": {"text": "x", "model": "m", "latency_s": float("nan")}})).encode()
    entry.write_bytes(garbage)
    again = client_for(httpserver, tmp_path)
    reply = again.chat(again.messages("q"))
    assert reply.text == "fresh" and not reply.cached and again.cache.misses == 1 and len(httpserver.log) == 2


def test_map_resumes_after_interruption(httpserver, tmp_path):
    broken = {"q2"}

    def handler(req):
        q = json.loads(req.data)["messages"][-1]["content"][-1]["text"]
        if q in broken:
            return Response("down", status=500)
        return Response(json.dumps(completion(f"a-{q}")), content_type="application/json")

    httpserver.expect_request(PATH).respond_with_handler(handler)
    c = client_for(httpserver, tmp_path, max_retries=0)
    requests = [c.messages(f"q{i}") for i in range(5)]
    out = c.map(requests)
    assert [o.text if not isinstance(o, ChatError) else o.kind for o in out] == ["a-q0", "a-q1", "http", "a-q3", "a-q4"]
    assert len(httpserver.log) == 5
    broken.clear()
    rerun = client_for(httpserver, tmp_path, max_retries=0)
    assert [o.text for o in rerun.map(requests)] == [f"a-q{i}" for i in range(5)]
    assert len(httpserver.log) == 6 and rerun.usage.requests == 1 and rerun.usage.cache_hits == 4


def test_concurrency_limit_and_accounting_with_mock_transport(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # plain http to a made-up host: no key may travel
    lock, state = threading.Lock(), {"now": 0, "peak": 0, "n": 0}
    # every answered request waits for a second one in flight: the limit (2) is reached by hand-shake,
    # not by luck; with a limit of 1 the pair never meets (BrokenBarrierError), above 2 the peak shows it
    pair = threading.Barrier(2, timeout=30)

    def handler(request: httpx2.Request) -> httpx2.Response:
        with lock:
            state["now"] += 1
            state["n"] += 1
            state["peak"] = max(state["peak"], state["now"])
            n = state["n"]
        try:
            if n == 1:
                raise httpx2.ConnectError("connection refused")  # a transport failure: retried
            pair.wait()
        finally:
            with lock:
                state["now"] -= 1
        return httpx2.Response(200, json=completion("x", prompt_tokens=1000, completion_tokens=100))

    cfg = ClientConfig(backend="openai", model="m", base_url="http://mock/v1", cache_dir=None, concurrency=2, backoff_s=0.0,
                       price_in_per_mtok=2.0, price_out_per_mtok=10.0)  # fmt: skip
    c = ChatClient(cfg, sleep=lambda s: None, http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))
    out = c.map([c.messages(f"q{i}") for i in range(6)])
    assert all(o.text == "x" for o in out)
    assert state["peak"] == 2 and state["n"] == 7
    u = c.usage.to_json()
    assert u["requests"] == 6 and u["retries"] == 1 and u["prompt_tokens"] == 6000 and u["completion_tokens"] == 600
    assert u["cost_usd"] == pytest.approx((6000 * 2.0 + 600 * 10.0) / 1e6)


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"backend": "grpc", "model": "m"}, "unknown backend 'grpc'"),
        ({"model": ""}, "client.model: required"),
        ({"backend": "local", "model": "/no/such/dir"}, "no model directory"),
        ({"model": "m", "reasoning_effort": "max"}, "reasoning_effort"),
        ({"model": "m", "concurrency": 0}, "concurrency"),
        ({"model": "m", "timeout_s": 0}, "timeout_s"),
        ({"model": "m", "tempreature": 0}, r"unknown setting\(s\) \['tempreature'\]"),
        ({"model": "m", "headers": {"a": 1}}, r"^client.headers: value of 'a' must be a string, got int 1$"),
        ({"model": "m", "headers": {"X-A": "x\r\nInjected: 1"}}, "value of 'X-A' contains control characters"),
        ({"model": "m", "headers": {"bad name": "x"}}, "'bad name' is not a valid header name"),
        ({"model": "m", "headers": ["a"]}, "client.headers: must be a mapping"),
        ({"model": "m", "timeout_s": float("nan")}, "client.timeout_s: must be a number, got float nan"),
        ({"model": "m", "temperature": float("inf")}, "client.temperature: must be a number, got float inf"),
        ({"model": "m", "max_tokens": 1.5}, "client.max_tokens: must be an integer, got float 1.5"),
        ({"model": "m", "concurrency": True}, "client.concurrency: must be an integer, got bool True"),
        ({"model": "m", "max_tokens": "many"}, "client.max_tokens: must be an integer, got str 'many'"),
        ({"model": "m", "allow_insecure": "yes"}, "client.allow_insecure: must be true or false"),
        ({"model": "m", "api_key_env": "MY KEY"}, "client.api_key_env: 'MY KEY' is not an environment variable name"),
        ({"model": "m", "base_url": "notaurl"}, "client.base_url: 'notaurl' is not an http"),
    ],
)
def test_bad_settings_are_one_line(settings, match):
    with pytest.raises(ValueError, match=match) as err:
        make_client(**settings)
    assert "\n" not in str(err.value)


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory):
    from cbm.vlm.tiny import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"))


def test_local_backend_generates_with_tiny_vlm(tiny_vlm, tmp_path):
    c = make_client(backend="local", model=str(tiny_vlm), cache_dir=str(tmp_path / "cache"), max_tokens=12)
    img = (np.random.default_rng(0).random((40, 40, 3)) * 255).astype(np.uint8)
    reply = c.chat(c.messages("Does this robot have knees?", [img]))
    assert isinstance(reply.text, str) and reply.completion_tokens >= 1 and reply.completion_tokens <= 12
    assert reply.prompt_tokens > len("Does this robot have knees?")  # text + image tokens
    c2 = make_client(backend="local", model=str(tiny_vlm), cache_dir=None, max_tokens=12)
    assert c2.chat(c2.messages("Does this robot have knees?", [img])).text == reply.text  # greedy: deterministic
    assert c.ask("Does this robot have knees?", image=img) == reply.text and c.usage.cache_hits == 1


def test_re_saved_local_weights_are_not_served_the_old_replies(tiny_vlm, tmp_path):
    """A model fine-tuned and saved over the old one (same directory, names and sizes) gets a new
    cache key: the reply comes from the new weights, not the disk cache."""
    import shutil

    from safetensors.torch import load_file, save_file

    model = tmp_path / "model"
    shutil.copytree(tiny_vlm, model)
    img = np.zeros((24, 24, 3), np.uint8)
    old = make_client(backend="local", model=str(model), cache_dir=str(tmp_path / "cache"), max_tokens=8)
    first = old.chat(old.messages("Knees?", [img]))
    weights = next(model.glob("*.safetensors"))
    tensors = load_file(weights)
    save_file({k: (v + 0.5 if v.is_floating_point() else v) for k, v in tensors.items()}, weights, metadata={"format": "pt"})
    new = make_client(backend="local", model=str(model), cache_dir=str(tmp_path / "cache"), max_tokens=8)
    assert new.endpoint != old.endpoint
    reply = new.chat(new.messages("Knees?", [img]))
    assert not reply.cached and new.usage.cache_hits == 0
    fresh = make_client(backend="local", model=str(model), cache_dir=None, max_tokens=8)
    assert reply.text == fresh.chat(fresh.messages("Knees?", [img])).text  # the new weights' own reply
    assert first.text is not None


def test_local_backend_refuses_a_directory_without_a_model(tmp_path):
    with pytest.raises(ValueError, match="cannot load a vision-language model"):
        make_client(backend="local", model=str(tmp_path), cache_dir=None)


def test_local_backend_prefix_and_option_scoring(tiny_vlm, tmp_path):
    c = make_client(backend="local", model=str(tiny_vlm), cache_dir=str(tmp_path / "cache"), max_tokens=5)
    msgs = c.messages("Glorp or Drent?", [np.zeros((30, 30, 3), np.uint8)])
    reply = c.chat(msgs, prefix="<answer>")
    assert reply.text.startswith("<answer>") and reply.completion_tokens == 5
    scores = c.score(msgs, "<answer>", ["Glorp", "Drent"])
    assert len(scores) == 2 and all(s < 0 for s in scores) and scores[0] != scores[1]
    assert make_client(backend="local", model=str(tiny_vlm), cache_dir=None).score(msgs, "<answer>", ["Glorp", "Drent"]) == pytest.approx(scores)
    assert c.score(msgs, "<answer>", ["Glorp", "Drent"]) == scores and c.usage.cache_hits == 0  # scores cached on disk too
    with pytest.raises(ValueError, match="cannot score options"):
        make_client(model="m", base_url="http://127.0.0.1:9/v1", cache_dir=None).score(msgs, "", ["a"])


def test_a_hosted_endpoint_without_its_key_is_one_line_before_any_request(monkeypatch):
    monkeypatch.delenv("CBM_NO_SUCH_KEY", raising=False)
    for base in (None, "https://openrouter.ai/api/v1"):
        with pytest.raises(ValueError, match="the environment variable CBM_NO_SUCH_KEY is not set") as err:
            make_client(model="m", base_url=base, api_key_env="CBM_NO_SUCH_KEY", cache_dir=None)
        assert "\n" not in str(err.value)
    assert make_client(model="m", base_url="http://localhost:8000/v1", api_key_env="CBM_NO_SUCH_KEY", cache_dir=None).model == "m"
    monkeypatch.setenv("CBM_NO_SUCH_KEY", "sk-test")
    assert make_client(model="m", api_key_env="CBM_NO_SUCH_KEY", cache_dir=None).model == "m"


def test_reasoning_models_get_max_completion_tokens_and_no_temperature(httpserver, tmp_path):
    """A reasoning model's name (o3, gpt-5...) sends max_completion_tokens and no temperature; any
    other model whose endpoint rejects max_tokens / temperature (HTTP 400 naming them, as OpenAI's
    does) is re-sent once without them, and the endpoint's word is remembered for later requests."""

    def strict(req):
        body = json.loads(req.data)
        if "max_tokens" in body:
            return Response(json.dumps({"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                                                  "Use 'max_completion_tokens' instead.", "type": "invalid_request_error"}}),
                            status=400, content_type="application/json")  # fmt: skip
        if "temperature" in body:
            return Response(json.dumps({"error": {"message": "Unsupported value: 'temperature' does not support 0 with this model. "
                                                  "Only the default (1) value is supported."}}), status=400, content_type="application/json")  # fmt: skip
        return Response(json.dumps(completion(f"<answer>{body['max_completion_tokens']}</answer>")), content_type="application/json")

    httpserver.expect_request(PATH).respond_with_handler(strict)
    c = client_for(httpserver, tmp_path, model="openai/o3-mini", max_tokens=77)
    assert c.chat(c.messages("q1")).text == "<answer>77</answer>" and len(httpserver.log) == 1  # no rejected request first
    other = client_for(httpserver, tmp_path, model="my-reasoner", max_tokens=55)
    assert other.chat(other.messages("q2")).text == "<answer>55</answer>"
    n = len(httpserver.log)
    assert n == 1 + 3  # max_tokens rejected, then temperature rejected, then accepted
    assert other.chat(other.messages("q3")).text == "<answer>55</answer>" and len(httpserver.log) == n + 1  # remembered
    httpserver.clear()
    httpserver.expect_request(PATH).respond_with_json({"error": {"message": "bad model"}}, status=400)
    plain = client_for(httpserver, tmp_path, model="gpt-4o", max_tokens=9)
    with pytest.raises(ChatError, match="HTTP 400: .*bad model"):  # any other 400 fails at once, in one line
        plain.chat(plain.messages("q4"))
    assert len(httpserver.log) == 1
