"""The bad-input corpus of the chat-client settings, through every command that takes a client
(cbm-concepts, cbm-edct, cbm-icl, cbm-intervene with the ``llm`` intervener): an API key bound for
plain http to a non-loopback host, malformed base URLs, headers and numbers, unknown settings and
backends, a missing key, and client / component targets that are not what they must be
(``os:system``). The harness and the refusal contract are in ``badinput.py``.

Every case runs with dummy keys in ``OPENAI_API_KEY`` / ``OPENROUTER_API_KEY`` (so the shipped
https defaults validate and each case reaches the setting it breaks) and with a socket guard
(``tests/netguard``) that kills the process on any name lookup or IP connection: every refusal
happens before a connection is tried. This module's ``fx`` is a light stand-in for the shared
one: a run whose checkpoint is never read (all these are refused while the config is
validated), a model directory without weights, and client presets carrying a NUL, a CR/LF or a
space in a header name (values no command line can hold).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from badinput import SLOW, assert_refused, params, run_cli

NO_KEY = "CBM_BADINPUT_NO_KEY"  # never set
REMOTE = "http://api.example.invalid/v1"  # RFC 6761: can never resolve
SECRET = "sk-badinput-dummy"
#: The socket guard (``sitecustomize``) every case runs under.
GUARD = Path(__file__).parents[1] / "netguard"
SEARCH = "hydra.searchpath=[file://FX/conf]"
REFUSE = "refusing to send the API key in $OPENAI_API_KEY in clear text"
LLM = ["checkpoint=FX/run", "intervener=[llm]"]
MAKE = "intervener.llm.client=cbm.vlm.client:make_client"


def kwargs(**kv: str) -> str:
    return "++intervener.llm.client_kwargs={" + ", ".join(f"{k}: {v}" for k, v in kv.items()) + "}"


CONCEPTS = [
    ([f"client.base_url={REMOTE}"], f"client.base_url: {REFUSE} to {REMOTE} (plain http to a non-loopback host)"),
    (["client.base_url=notaurl"], "client.base_url: 'notaurl' is not an http(s) URL"),
    (["client.base_url=ftp://files.example.invalid/v1"], "'ftp://files.example.invalid/v1' is not an http(s) URL"),
    (["client.base_url=http://"], "client.base_url: 'http://' has no host"),
    (["client.base_url=''"], "client.base_url: must be an http(s) URL"),
    (["client.base_url='http://exa mple.invalid/v1'"], "contains spaces or control characters"),
    (["client.base_url=http://api.example.invalid:99999/v1"], "has a bad port"),
    (["client.base_url=https://user:pw@api.example.invalid/v1"], "the URL carries credentials"),
    ([SEARCH, "client=nul"], r"client.base_url: 'http://a\x00b.invalid/v1' contains spaces or control characters"),
    (["client.base_url=${oc.env:CBM_BADINPUT_CTRL_URL}"], r"'http://a\x01b.invalid/v1' contains spaces or control characters"),
    (["client.headers={a: 1}"], "client.headers: value of 'a' must be a string, got int 1"),
    ([SEARCH, "client=crlf"], "client.headers: value of 'X-Title' contains control characters"),
    ([SEARCH, "client=badname"], "client.headers: 'bad name' is not a valid header name"),
    (["client.headers={Authorization: 'Bearer x'}", f"client.base_url={REMOTE}", f"client.api_key_env={NO_KEY}"],
     "refusing to send the 'Authorization' header in clear text"),
    (["client.timeout_s=0"], "client.timeout_s: must be > 0"),
    (["client.max_retries=-1"], "client.max_retries: must be >= 0, got -1"),
    (["client.concurrency=0"], "client.concurrency: must be >= 1, got 0"),
    (["client.max_tokens=0"], "client.max_tokens: must be >= 1, got 0"),
    (["client.timeout_s=nan"], "client.timeout_s: must be a number, got float nan"),
    (["client.temperature=inf"], "client.temperature: must be a number, got float inf"),
    (["client.max_tokens=many"], "client.max_tokens: must be an integer, got str 'many'"),
    (["+client.tempreature=0"], "client: unknown setting(s) ['tempreature']"),
    (["client.backend=grpc"], "client.backend: unknown backend 'grpc' (choose from: openai, local)"),
    (["client=local"], "client.model: required"),
    (["client.backend=local"], "client.model: no model directory at 'gpt-4o-mini'"),
    ([f"client.api_key_env={NO_KEY}"], f"the environment variable {NO_KEY} is not set (the API key for https://api.openai.com/v1)"),
    (["client=openrouter", f"client.api_key_env={NO_KEY}"], "(the API key for https://openrouter.ai/api/v1)"),
    (["client.api_key_env='MY KEY'"], "client.api_key_env: 'MY KEY' is not an environment variable name"),
]
EDCT = [
    ([f"vlm.base_url={REMOTE}"], f"vlm: client.base_url: {REFUSE}"),
    (["llm.base_url=http://10.1.2.3:8000/v1"], f"llm: client.base_url: {REFUSE} to http://10.1.2.3:8000/v1"),
    (["judge.base_url='http://[::ffff:10.0.0.1]/v1'"], f"judge: client.base_url: {REFUSE}"),
    (["+judge2={model: m, base_url: 'http://api.example.invalid/v1'}"], f"judge2: client.base_url: {REFUSE}"),
    (["vlm.base_url=notaurl"], "vlm: client.base_url: 'notaurl' is not an http(s) URL"),
    (["llm.headers={a: 1}"], "llm: client.headers: value of 'a' must be a string, got int 1"),
    (["judge.timeout_s=0"], "judge: client.timeout_s: must be > 0"),
    (["vlm.concurrency=0"], "vlm: client.concurrency: must be >= 1"),
    ([f"vlm.api_key_env={NO_KEY}"], f"vlm: client: the environment variable {NO_KEY} is not set"),
    (["+vlm.bogus=1"], "vlm: client: unknown setting(s) ['bogus']"),
    (["client@vlm=local"], "vlm: client.model: required"),
    (["vlm.allow_insecure=1"], "vlm: client.allow_insecure: must be true or false, got int 1"),
]
EDCT_LATE = [  # a local model directory without weights: found when the model loads
    (["client@vlm=local", "vlm.model=FX/files/empty_dir"], "cannot load a vision-language model from"),
]
ICL = [
    ([f"models.vlm.base_url={REMOTE}"], f"models.vlm: client.base_url: {REFUSE}"),
    ([f"judge.base_url={REMOTE}"], f"judge: client.base_url: {REFUSE}"),
    (["+models.other={model: m, base_url: 'http://api.example.invalid/v1'}"], f"models.other: client.base_url: {REFUSE}"),
    (["models.vlm.base_url=ftp://x.example.invalid"], "models.vlm: client.base_url: 'ftp://x.example.invalid' is not an http(s) URL"),
    (["judge.headers={a: 1}"], "judge: client.headers: value of 'a' must be a string"),
    (["models.vlm.temperature=nan"], "models.vlm: client.temperature: must be a number, got float nan"),
    ([f"judge.api_key_env={NO_KEY}"], f"judge: client: the environment variable {NO_KEY} is not set"),
    (["models.vlm.backend=grpc"], "models.vlm: client.backend: unknown backend 'grpc'"),
]
INTERVENE = [
    (["intervener.llm.client=os:system", kwargs(command="'touch FX/files/PWNED'")], "llm.client: 'os:system' is a builtin_function_or_method, not a client factory"),
    (["intervener.llm.client=builtins:eval", kwargs(source="'1'")], "llm.client: 'builtins:eval' is a builtin_function_or_method, not a client factory"),
    (["intervener.llm.client=subprocess:run", kwargs(args="[touch, FX/files/PWNED]")], "llm.client: 'subprocess:run' is a function, not a client factory"),
    (["intervener.llm.client=subprocess:Popen", kwargs(args="[touch, FX/files/PWNED]")], "llm.client: 'subprocess:Popen' is a class, not a client factory"),
    (["intervener.llm.client=shutil:rmtree", kwargs(path="FX/files")], "llm.client: 'shutil:rmtree' is a function, not a client factory"),
    (["intervener.llm.client=cbm.vlm.config:ClientConfig", kwargs(model="m")], "'cbm.vlm.config:ClientConfig' is a class, not a client factory"),
    ([MAKE, kwargs(model="m", base_url=f"'{REMOTE}'")], f"llm.client_kwargs: client.base_url: {REFUSE}"),
    ([MAKE, kwargs(model="m", base_url="notaurl")], "llm.client_kwargs: client.base_url: 'notaurl' is not an http(s) URL"),
    ([MAKE, kwargs(model="m", command="x")], "llm.client_kwargs: client: unknown setting(s) ['command']"),
    ([MAKE, kwargs(model="m", headers="{a: 1}")], "llm.client_kwargs: client.headers: value of 'a' must be a string, got int 1"),
    ([MAKE, kwargs(model="m", timeout_s="0")], "llm.client_kwargs: client.timeout_s: must be > 0"),
    ([MAKE, kwargs(model="m", api_key_env=NO_KEY)], f"llm.client_kwargs: client: the environment variable {NO_KEY} is not set"),
    (["intervener.llm.client=cbm.vlm.client:ChatClient"], "llm.client_kwargs: client.model: required"),
    (["intervener=[oracle]", "intervener.oracle._target_=os.system"], "intervener 'oracle': _target_ os.system is a builtin_function_or_method, not an intervener class"),
    (["policy=[random]", "policy.random._target_=subprocess.Popen"], "policy 'random': _target_ subprocess.Popen is a class, not a policy class"),
]

CASES = (
    [("cbm-concepts", ["extract", "out=x.yaml", *a], m, ()) for a, m in CONCEPTS]
    + [("cbm-edct", a, m, ()) for a, m in EDCT]
    + [("cbm-edct", a, m, (SLOW,)) for a, m in EDCT_LATE]
    + [("cbm-icl", a, m, ()) for a, m in ICL]
    + [("cbm-intervene", [*LLM, *a] if a[0].startswith("intervener.llm") else ["checkpoint=FX/run", *a], m, ()) for a, m in INTERVENE]
)


#: An endpoint nobody listens at (the discard port on loopback): refused by the first request's
#: connection, so these run without the guard (which would stop the attempt itself) and with the
#: client's retries off or a millisecond backoff (no real wait).
EXTRACT = ["extract", "out=x.yaml", "client.model=m", "data.modality=image", "data.n_train=40", "data.n_calib=0", "data.n_test=0", "n_per_class=1"]
UNREACHABLE = [
    ("cbm-concepts", [*EXTRACT, "client.base_url=http://127.0.0.1:9/v1", "client.max_retries=0"],
     "client.base_url: cannot connect to http://127.0.0.1:9/v1: connection refused (no server listens there; is it running, "
     "and is the URL right?)", ()),
    ("cbm-concepts", [*EXTRACT, "client.base_url=http://localhost:9/v1", "client.max_retries=2", "client.backoff_s=0.001"],
     "client.base_url: cannot connect to http://localhost:9/v1: connection refused after 3 attempts", (SLOW,)),
    # commands that write their inputs (EDCT's items, ICL's episodes) before the first request: the
    # run folder they made goes again
    ("cbm-edct", [*(f"{c}.{k}" for c in ("vlm", "llm", "judge") for k in ("base_url=http://127.0.0.1:9/v1", "model=m", "max_retries=0")),
                  "items.n=2"], "client.base_url: cannot connect to http://127.0.0.1:9/v1: connection refused", ()),
    ("cbm-icl", [*(f"{c}.{k}" for c in ("models.vlm", "judge") for k in ("base_url=http://127.0.0.1:9/v1", "model=m", "max_retries=0")),
                 "episodes.n_ways=[2]", "episodes.k_shots=[1]", "episodes.reps_times_n=2"], "client.base_url: cannot connect to http://127.0.0.1:9/v1: connection refused", ()),
]


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Path:
    """A stand-in run (an empty checkpoint: never read), files and client presets."""
    root = tmp_path_factory.mktemp("bad-client-inputs")
    (root / "run" / "checkpoints").mkdir(parents=True)
    (root / "run" / "checkpoints" / "best.ckpt").write_bytes(b"")
    (root / "files" / "empty_dir").mkdir(parents=True)
    (root / "cache").mkdir()
    presets = root / "conf" / "client"
    presets.mkdir(parents=True)
    (presets / "nul.yaml").write_text('defaults:\n  - openai\n  - _self_\nbase_url: "http://a\\0b.invalid/v1"\n')
    (presets / "badname.yaml").write_text('defaults:\n  - openai\n  - _self_\nheaders: {"bad name": x}\n')
    (presets / "crlf.yaml").write_text('defaults:\n  - openai\n  - _self_\nheaders: {X-Title: "cbm\\r\\nX-Injected: 1"}\n')
    return root


def case_env(fx: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(GUARD), os.environ.get("PYTHONPATH", "")) if p)
    return {"OPENAI_API_KEY": SECRET, "OPENROUTER_API_KEY": SECRET, "PYTHONPATH": path,
            "CBM_BADINPUT_CTRL_URL": "http://a\x01b.invalid/v1"}  # fmt: skip


def test_the_client_corpus_is_large_and_covers_every_command():
    assert len(CASES) >= 40 and len({(p, tuple(a)) for p, a, _, _ in CASES}) == len(CASES)
    assert {p for p, _, _, _ in CASES} == {"cbm-concepts", "cbm-edct", "cbm-icl", "cbm-intervene"}


@pytest.mark.parametrize("prog, args, message", params(CASES))
def test_bad_client_input_gives_one_line_and_leaves_nothing(fx, tmp_path, prog, args, message):
    assert NO_KEY not in os.environ
    line = assert_refused(fx, tmp_path, prog, args, message, env=case_env(fx))
    assert SECRET not in line and "NETWORK ATTEMPT" not in line


@pytest.mark.parametrize("prog, args, message", params(UNREACHABLE))
def test_an_unreachable_endpoint_is_one_line_naming_the_url(fx, tmp_path, prog, args, message):
    """A connection refused before the endpoint ever answered is bad input (a wrong base_url, a server
    not running): exit 2 and one line naming the URL, not a failed request (exit 1)."""
    env = {"OPENAI_API_KEY": SECRET, **{k: "" for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")}}
    line = assert_refused(fx, tmp_path, prog, args, message, env=env)
    assert SECRET not in line


def test_the_guard_is_live_in_every_case(fx, tmp_path):
    """The positive control: the cases run forked from a server started under the guard, so a
    command that does connect (to loopback, which the client would allow) is killed at the attempt."""
    args = ["extract", "out=x.yaml", "client.base_url=http://127.0.0.1:9/v1", "client.model=m", "client.max_retries=0",
            "data.modality=image", "data.n_train=40", "data.n_calib=0", "data.n_test=0", "n_per_class=1"]  # fmt: skip
    res = run_cli(fx, "cbm-concepts", args, tmp_path, case_env(fx))
    assert res.returncode == 99 and "NETWORK ATTEMPT" in res.stderr, (res.returncode, res.stderr[-2000:])
