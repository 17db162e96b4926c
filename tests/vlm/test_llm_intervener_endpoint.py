"""The ``llm`` intervener inside ``cbm-intervene`` with an OpenAI-compatible endpoint configured:
a scripted loopback server that looks each robot image up and answers the asked concepts
truthfully must give exactly the oracle's accuracies; a server that answers garbage either fails
with one line or falls back to the model, as configured."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from werkzeug import Response

from cbm.experiments import intervene
from cbm.vlm.messages import decode_image_part, to_pil

SMALL = {"name": "robot", "modality": "image", "image_size": 16, "n_train": 120, "n_calib": 0, "n_test": 60}
ASKED = re.compile(r'<answer concept="([^"]+)">yes or no</answer>')


def make_checkpoint(path: Path, cache: Path, data: dict | None = None) -> Path:
    """An untrained image CBM saved in cbm-train's checkpoint format (no training: fast)."""
    import lightning as L

    from cbm.core.validation import as_dict
    from cbm.models import build_model
    from synthetic.registry import data_config, data_info, load_data

    dcfg = data_config(data or SMALL)
    ds = load_data(dcfg, str(cache))
    torch.manual_seed(0)
    m = build_model({"name": "cbm"}, data_info(ds, dcfg), as_dict(dcfg))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": m.state_dict(), "hyper_parameters": dict(m.hparams), "pytorch-lightning_version": L.__version__}, path)
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("llm-endpoint")
    make_checkpoint(d / "cbm" / "checkpoints" / "best.ckpt", d / "cache")
    return d


def truth_by_image(run_dir: Path) -> tuple[dict[bytes, dict[str, bool]], list[str]]:
    """Each test image's exact pixels (as the client sends them) -> its true concepts."""
    from cbm.training.checkpoint import load_run

    model, dm, _ = load_run(run_dir / "cbm", str(run_dir / "cache"))
    names = list(model.info.concept_names)
    t = dm.split("test").tensors
    table = {np.asarray(to_pil(x)).tobytes(): {n: bool(v) for n, v in zip(names, c.tolist())} for x, c in zip(t["x"], t["c"])}
    assert len(table) == len(t["x"]), "test images must be distinct for the lookup"
    return table, names


def oracle_server(httpserver, truth: dict[bytes, dict[str, bool]]) -> None:
    def handler(req):
        user = json.loads(req.data)["messages"][-1]["content"]
        image = next(p for p in user if p["type"] == "image_url")
        text = next(p["text"] for p in user if p["type"] == "text")
        concepts = truth[np.asarray(decode_image_part(image).convert("RGB")).tobytes()]
        answer = "\n".join(f'<answer concept="{n}">{"yes" if concepts[n] else "no"}</answer>' for n in ASKED.findall(text))
        body = {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}  # fmt: skip
        return Response(json.dumps(body), content_type="application/json")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handler)


def app_cfg(run_dir: Path, httpserver, out: str, **llm) -> dict:
    client = {"model": "scripted", "base_url": httpserver.url_for("/v1"), "cache_dir": str(run_dir / f"replies-{out}"), "backoff_s": 0.0}
    return {
        "checkpoint": str(run_dir / "cbm"), "output_dir": str(run_dir / out), "cache_dir": str(run_dir / "cache"),
        "intervener": {"oracle": {}, "llm": {"client": "cbm.vlm.client:make_client", "client_kwargs": client, "subject": "robot", **llm}},
        "policy": {"random": {}, "uncertainty": {}}, "ks": [0, 1, 3, "max"],
    }  # fmt: skip


def test_llm_intervener_through_an_endpoint_matches_the_oracle(run_dir, httpserver):
    truth, names = truth_by_image(run_dir)
    oracle_server(httpserver, truth)
    grid = intervene.run({**app_cfg(run_dir, httpserver, "truthful"), "per_example": True})
    m = len(names)
    for (iv, policy, k), ex in grid.examples.items():
        if iv == "llm":  # the same predictions as the oracle, example by example
            assert torch.equal(ex["pred"], grid.examples[("oracle", policy, k)]["pred"]), (policy, k)
    assert bool(grid.examples[("llm", "random", m)]["mask"].all())  # k = max asked every concept
    assert grid.meta["llm_queries"] > 0 and grid.meta["llm_fallbacks"] == 0
    n_requests = len(httpserver.log)
    assert n_requests == grid.meta["llm_queries"] == grid.meta["llm_usage"]["requests"]
    assert grid.meta["llm_usage"]["prompt_tokens"] == 100 * n_requests
    intervene.run(app_cfg(run_dir, httpserver, "truthful"))  # a rerun reads every reply from the disk cache
    assert len(httpserver.log) == n_requests
    # what the endpoint supplied at k = max is the ground truth, concept by concept
    from types import SimpleNamespace

    from cbm.interventions.interveners.llm import LLMIntervener
    from cbm.training.checkpoint import load_run
    from cbm.vlm.client import make_client

    _, dm, _ = load_run(run_dir / "cbm", str(run_dir / "cache"))
    t = dm.split("test").tensors
    client = make_client(**app_cfg(run_dir, httpserver, "truthful")["intervener"]["llm"]["client_kwargs"])
    llm = LLMIntervener(client, names, subject="robot")
    state = SimpleNamespace(probs=torch.full(t["c"].shape, 0.5), n_concepts=m)
    x = t["x"].float() / 255.0 if t["x"].dtype == torch.uint8 else t["x"]  # as the loader gives it
    values = llm({"x": x, "idx": torch.arange(len(t["x"]))}, state, torch.ones(t["c"].shape, dtype=torch.bool))
    assert torch.equal(values, t["c"].float())
    assert llm.n_queries == len(x) and llm.n_fallbacks == 0


def test_garbage_replies_fail_in_one_line_or_fall_back(run_dir, httpserver):
    httpserver.expect_request("/v1/chat/completions").respond_with_json(
        {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": "I cannot tell."}, "finish_reason": "stop"}]})  # fmt: skip
    with pytest.raises(ValueError, match=r"llm intervener: no parseable answer for \[") as e:
        intervene.run(app_cfg(run_dir, httpserver, "garbage", retries=0))
    assert "\n" not in str(e.value)
    grid = intervene.run(app_cfg(run_dir, httpserver, "fallback", retries=0, on_unparseable="model"))
    acc = {(r["intervener"], r["policy"], r["k"]): r["accuracy"] for r in grid.rows}
    assert all(a == acc[("llm", "random", 0)] for (iv, _, _), a in acc.items() if iv == "llm")  # nothing changed
    assert grid.meta["llm_fallbacks"] > 0


def test_text_data_is_sent_as_its_description(tmp_path, httpserver):
    """Text-modality robots: the LLM reads the example's own description (no image part)."""
    from synthetic.robot.text import VOCAB

    seen = []

    def handler(req):
        user = json.loads(req.data)["messages"][-1]["content"]
        seen.append(user)
        text = user[-1]["text"]
        answer = "\n".join(f'<answer concept="{n}">yes</answer>' for n in ASKED.findall(text))
        body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]}  # fmt: skip
        return Response(json.dumps(body), content_type="application/json")

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(handler)
    make_checkpoint(tmp_path / "cbm" / "checkpoints" / "best.ckpt", tmp_path / "cache", {**SMALL, "modality": "text", "n_test": 10})
    cfg = app_cfg(tmp_path, httpserver, "text")
    cfg["policy"], cfg["ks"], cfg["per_example"] = {"random": {}}, ["max"], True
    grid = intervene.run(cfg)
    assert grid.meta["llm_queries"] == 10 and len(seen) == 10
    assert all(len(u) == 1 and u[0]["type"] == "text" for u in seen)  # no image part
    from cbm.training.checkpoint import load_run

    _, dm, _ = load_run(tmp_path / "cbm", str(tmp_path / "cache"))
    first = " ".join(VOCAB[t] for t in dm.split("test").tensors["x"][0].tolist() if t)
    assert any(f"Description: {first}" in u[0]["text"] for u in seen)


def test_another_endpoint_never_gets_the_cached_replies(run_dir, httpserver):
    """Replies cached from one server are not served when the intervener points at another (here a
    dead one): the run fails with the endpoint's error instead of passing on the old answers."""
    import socket

    from cbm.vlm.reply import EndpointUnreachable

    truth, _ = truth_by_image(run_dir)
    oracle_server(httpserver, truth)
    cfg = app_cfg(run_dir, httpserver, "moved", retries=0)
    cfg["policy"], cfg["ks"] = {"random": {}}, [1]
    intervene.run(cfg)  # fills the reply cache
    asked = len(httpserver.log)
    assert asked > 0
    assert intervene.run(cfg) and len(httpserver.log) == asked  # same endpoint: every reply from the cache
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    cfg["intervener"]["llm"]["client_kwargs"] = {**cfg["intervener"]["llm"]["client_kwargs"], "base_url": f"http://127.0.0.1:{dead}/v1", "max_retries": 0}
    with pytest.raises(EndpointUnreachable, match=f"cannot connect to http://127.0.0.1:{dead}/v1: connection refused"):
        intervene.run(cfg)  # nothing ever answered there: bad input (exit 2 on the command line), not a failed request
