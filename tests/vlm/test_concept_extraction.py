"""Concept extraction against a scripted chat-completions server on loopback (pytest-httpserver):
the request carries every example image after its class name; a reply mixing valid concepts, a
bad expression, a duplicate name and an unclosed block keeps exactly the valid ones with the
expected rejection kinds; the written file loads and a robot dataset built on it annotates exactly
the expressions; the ``cbm-concepts`` CLI end to end, its one-line errors, and no file when
nothing valid was proposed."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from werkzeug import Response

from cbm.vlm.apps import concepts as concepts_cli
from cbm.vlm.client import ChatClient
from cbm.vlm.concept_extraction import (
    NoConceptsError,
    build_messages,
    example_images,
    example_rows,
    extract_concepts,
    parse_proposals,
    render_instruction,
    select_concepts,
    write_concept_set,
)
from cbm.vlm.config import ClientConfig
from cbm.vlm.messages import DATA_URL_PREFIX
from synthetic.registry import data_config, load_data
from synthetic.robot.attributes import EXPRESSION_NAMES, attribute_table
from synthetic.robot.concepts import Concept, evaluate, load_concept_set

PATH = "/v1/chat/completions"
N_PER_CLASS = 2
CLASSES = ["Drent", "Glorp"]
VOCAB = {name: f"the {name} attribute" for name in EXPRESSION_NAMES if name != "robot_id"}
INSTRUCTION = "Classes: {classes} ({n_classes}). Up to {max_concepts} concepts over:\n{vocabulary}"
#: A small robot dataset for the examples: enough rows of the rarer class in the train split.
SMALL_ROBOTS = {"name": "robot", "modality": "image", "image_size": 16, "n_train": 96, "n_calib": 0, "n_test": 0}

VALID = {
    "boxy_head": "head_round == 0",
    "pointy_feet": "foot_pointy",
    "raised_arms": "(arm_left >= 3) & (arm_right >= 3)",
    "warm_colours": "palette in (2, 3, 4)",
}
REPLY = f"""Here are my concepts.
<concept name="boxy_head"><description>the head is square</description><expr>{VALID["boxy_head"]}</expr></concept>
<concept name="pointy_feet">
  <description>pointy feet</description>
  <expr>`{VALID["pointy_feet"]}`</expr>
</concept>
<concept name="glowing_eyes"><description>eyes glow</description><expr>eye_glow == 1</expr></concept>
<concept name="boxy_head"><description>again</description><expr>body_round == 0</expr></concept>
<concept name='raised_arms'><description>both arms up</description><expr>(arm_left &gt;= 3) &amp; (arm_right &gt;= 3)</expr></concept>
<concept name="warm_colours"><description>red, orange or yellow</description><expr>{VALID["warm_colours"]}</expr></concept>
<concept name="Open-Mouth"><description>open mouth</description><expr>mouth_closed == 0</expr></concept>
<concept name="wide_stance"><description>legs spread wide</description><expr>leg_spread >= 2</expr>
"""
EXPECTED_REJECTED = {"glowing_eyes": "bad_expr", "boxy_head": "duplicate", "Open-Mouth": "bad_name", "wide_stance": "unclosed"}


def completion(text: str, finish_reason: str = "stop") -> dict:
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 300, "total_tokens": 1200}}  # fmt: skip


def client_for(server, tmp_path, **over) -> ChatClient:
    settings = dict(backend="openai", model="m", base_url=server.url_for("/v1"), cache_dir=str(tmp_path / "replies"), max_retries=1, backoff_s=0.0)
    return ChatClient(ClientConfig(**{**settings, **over}), sleep=lambda s: None)


@pytest.fixture(scope="module")
def robots(tmp_path_factory):
    return load_data(data_config(dict(SMALL_ROBOTS)), tmp_path_factory.mktemp("robots"))


def sent_body(server) -> dict:
    (req, _), = server.log
    return json.loads(req.data)


def test_request_images_classes_and_parsed_concepts(httpserver, tmp_path, robots):
    httpserver.expect_request(PATH, method="POST").respond_with_json(completion(REPLY))
    rows = example_rows(robots, "train", N_PER_CLASS, seed=0)
    assert list(rows) == CLASSES and all(len(v) == N_PER_CLASS for v in rows.values())
    assert all(robots.y[i] == k for k, name in enumerate(CLASSES) for i in rows[name])
    assert rows == example_rows(robots, "train", N_PER_CLASS, seed=0)  # the same examples for the same seed
    client = client_for(httpserver, tmp_path)
    result = extract_concepts(client, example_images(robots, rows), INSTRUCTION, VOCAB, max_concepts=8, system="Be exact.", rows=rows)

    body = sent_body(httpserver)
    system, user = body["messages"]
    assert system == {"role": "system", "content": "Be exact."}
    parts = user["content"]
    images = [p for p in parts if p["type"] == "image_url"]
    assert len(images) == len(CLASSES) * N_PER_CLASS and all(p["image_url"]["url"].startswith(DATA_URL_PREFIX) for p in images)
    texts = [p["text"] for p in parts if p["type"] == "text"]
    for name in CLASSES:  # each class's images come right after the text naming it
        at = next(i for i, p in enumerate(parts) if p["type"] == "text" and f"'{name}'" in p["text"])
        assert [p["type"] for p in parts[at + 1 : at + 1 + N_PER_CLASS]] == ["image_url"] * N_PER_CLASS
    instruction = texts[-1]
    assert "Drent, Glorp (2)" in instruction and "Up to 8 concepts" in instruction and "- foot_pointy: the foot_pointy attribute" in instruction

    assert [(c.name, c.expr) for c in result.concepts] == list(VALID.items())
    assert {r.name: r.kind for r in result.rejected} == EXPECTED_REJECTED
    reasons = {r.name: r.reason for r in result.rejected}
    assert "eye_glow" in reasons["glowing_eyes"] and "already taken" in reasons["boxy_head"]
    assert result.raw == REPLY and result.n_images == len(images) and result.example_rows == rows
    assert result.usage["requests"] == 1 and result.usage["prompt_tokens"] == 900

    out = write_concept_set(tmp_path / "sets" / "vlm.yaml", "vlm", "proposed", result.concepts, header="from a test\nsecond line")
    text = out.read_text()
    assert text.startswith("# from a test\n# second line\n")
    loaded = load_concept_set(str(out))
    assert loaded.name == "vlm" and [(c.name, c.expr) for c in loaded.concepts] == list(VALID.items())
    assert not list(out.parent.glob(".*.tmp"))  # the atomic write left no temp file


def test_written_set_trains_like_its_expressions(httpserver, tmp_path, shared_cache):
    httpserver.expect_request(PATH).respond_with_json(completion(REPLY))
    client = client_for(httpserver, tmp_path)
    examples = {name: [np.zeros((8, 8, 3), np.uint8)] for name in CLASSES}
    result = extract_concepts(client, examples, INSTRUCTION, VOCAB, max_concepts=8)
    path = write_concept_set(tmp_path / "vlm.yaml", "vlm", "", result.concepts)
    cfg = data_config({"name": "robot", "modality": "tabular", "concept_set": str(path), "n_train": 40, "n_calib": 0, "n_test": 40})
    data = load_data(cfg, shared_cache)
    assert data.concept_names == list(VALID)
    table = attribute_table(data.meta)
    expected = np.stack([evaluate(expr, table).astype(bool) for expr in VALID.values()], axis=1).astype(np.float32)
    np.testing.assert_array_equal(data.c, expected)
    assert 0 < expected.mean() < 1  # the concepts vary over the data


def test_parse_is_robust_and_limits_apply():
    assert select_concepts("no tags at all", list(VOCAB), 4)[1][0].kind == "missing"
    assert select_concepts(None, list(VOCAB), 4)[1][0].kind == "missing"
    blocks = parse_proposals('<concept><description>d</description><expr>knees</expr></concept>'
                             '<concept name="a"><expr>knees</expr></concept>'
                             '<concept name="b"><description>d</description><expr>knees</concept>'
                             '<concept name="c"><description>  </description><expr>knees</expr></concept>'
                             '<concept name="d"><description>x</description><description>y</description><expr>knees</expr></concept>')  # fmt: skip
    assert [(p.name, p.error.kind) for p in blocks] == [(None, "missing"), ("a", "missing"), ("b", "unclosed"), ("c", "empty"), ("d", "conflicting")]
    reply = "".join(f'<concept name="c{i}"><description>d</description><expr>knees == {i % 2}</expr></concept>' for i in range(4))
    kept, rejected = select_concepts(reply + '<concept name="k"><description>d</description><expr>1</expr></concept>'
                                     '<concept name="r"><description>d</description><expr>robot_id > 3</expr></concept>', ["knees"], 5)  # fmt: skip
    assert [c.name for c in kept] == ["c0", "c1"]
    assert [(r.name, r.kind) for r in rejected] == [("c2", "duplicate"), ("c3", "duplicate"), ("k", "bad_expr"), ("r", "bad_expr")]
    kept, rejected = select_concepts("".join(f'<concept name="c{i}"><description>d</description><expr>palette == {i}</expr></concept>' for i in range(3)), ["palette"], 2)
    assert [c.name for c in kept] == ["c0", "c1"] and [(r.name, r.kind) for r in rejected] == [("c2", "over_limit")]
    with pytest.raises(ValueError, match="unknown placeholder"):
        render_instruction("{nope}", 1, VOCAB, CLASSES, 1)
    msgs = build_messages({"A": [np.zeros((4, 4, 3), np.uint8)]}, "go")
    assert [m["role"] for m in msgs] == ["user"] and msgs[0]["content"][-1] == {"type": "text", "text": "go"}


def test_no_valid_concept_is_an_error_and_no_file(httpserver, tmp_path):
    bad = '<concept name="x"><description>d</description><expr>import os</expr></concept><concept name="y"><description>d</description>'
    httpserver.expect_request(PATH).respond_with_json(completion(bad, finish_reason="length"))
    client = client_for(httpserver, tmp_path)
    result = extract_concepts(client, {name: [np.zeros((8, 8, 3), np.uint8)] for name in CLASSES}, INSTRUCTION, VOCAB, 4)
    assert result.concepts == [] and [r.kind for r in result.rejected] == ["bad_expr", "unclosed"] and result.truncated
    with pytest.raises(NoConceptsError, match=r"no valid concept \(bad_expr x1, unclosed x1\).*max_tokens"):
        result.require_concepts()
    out = tmp_path / "none.yaml"
    with pytest.raises(NoConceptsError):
        write_concept_set(out, "none", "", [])
    with pytest.raises(ValueError, match="unknown name"):
        write_concept_set(out, "bad", "", [Concept("a", "", "eye_glow")])
    assert not out.exists()


def run_cli(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["cbm-concepts", *argv])
    code = 0
    try:
        concepts_cli.main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_end_to_end(httpserver, tmp_path, monkeypatch, capsys, shared_cache):
    httpserver.expect_request(PATH).respond_with_json(completion(REPLY))
    out = tmp_path / "sets" / "robot_vlm.yaml"
    client = [f"client.base_url={httpserver.url_for('/v1')}", "client.model=m", f"client.cache_dir={tmp_path / 'replies'}", "client.backoff_s=0"]
    data = [f"data.{k}={v}" for k, v in SMALL_ROBOTS.items() if k != "name"]
    code, stdout, stderr = run_cli(monkeypatch, capsys, "extract", f"out={out}", f"n_per_class={N_PER_CLASS}", f"cache_dir={shared_cache}", *client, *data)
    assert code == 0, stderr
    assert load_concept_set(str(out)).names == list(VALID)
    assert "kept 4 concept(s)" in stdout and "rejected 4" in stdout and "glowing_eyes: bad_expr" in stdout
    assert "usage: 1 requests" in stdout and f"cbm-train data.concept_set={out}" in stdout
    assert "Drent" in out.read_text() and "model m" in out.read_text()  # provenance header
    body = sent_body(httpserver)
    assert sum(p["type"] == "image_url" for p in body["messages"][-1]["content"]) == len(CLASSES) * N_PER_CLASS
    assert body["max_tokens"] == 2048  # conf/concepts.yaml raises the client's default

    code, stdout, stderr = run_cli(monkeypatch, capsys, "extract", f"out={tmp_path / 'again.yaml'}", f"cache_dir={shared_cache}", *client, *data, "n_per_class=0")
    assert code == 2 and stderr.strip() == "cbm-concepts: error: config: n_per_class: must be >= 1, got 0" and stdout == ""
    code, _, stderr = run_cli(monkeypatch, capsys, "extrakt", f"out={out}")
    assert code == 2 and stderr.startswith("cbm-concepts: error: usage:") and stderr.count("\n") == 1
    code, _, stderr = run_cli(monkeypatch, capsys, "extract")
    assert code == 2 and "out: required" in stderr and stderr.count("\n") == 1
    code, _, stderr = run_cli(monkeypatch, capsys, "extract", f"out={out}", "client=nope")
    assert code == 2 and "unknown client 'nope'" in stderr


def test_cli_unreachable_endpoint_and_nothing_valid(httpserver, tmp_path, monkeypatch, capsys, shared_cache):
    data = [f"data.{k}={v}" for k, v in SMALL_ROBOTS.items() if k != "name"]
    common = [f"cache_dir={shared_cache}", "client.model=m", "client.cache_dir=null", "client.backoff_s=0", f"n_per_class={N_PER_CLASS}", *data]
    httpserver.expect_request(PATH).respond_with_response(Response("down", status=503))
    out = tmp_path / "down.yaml"
    code, _, stderr = run_cli(monkeypatch, capsys, "extract", f"out={out}", f"client.base_url={httpserver.url_for('/v1')}", "client.max_retries=1", *common)
    assert code == 1 and stderr.startswith("cbm-concepts: error: the model endpoint failed after 2 attempt(s): HTTP 503")
    assert stderr.count("\n") == 1 and len(httpserver.log) == 2 and not out.exists()

    httpserver.clear()
    httpserver.expect_request(PATH).respond_with_json(completion("I cannot tell them apart."))
    code, stdout, stderr = run_cli(monkeypatch, capsys, "extract", f"out={out}", f"client.base_url={httpserver.url_for('/v1')}", *common)
    assert code == 2 and "no valid concept (missing x1); nothing written" in stderr and "no <concept> block" in stdout
    assert not out.exists()
