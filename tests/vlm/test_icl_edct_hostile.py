"""Hostile inputs to ``cbm-icl`` and ``cbm-edct``: tampered episodes files (refused, one exact
line each; the valid file accepted; a recomputed digest changes nothing), tampered trial and item
records (redone from the reply cache, the tables unchanged), ``target`` settings that name plain
functions (never called: a marker file they would write stays absent), prompt templates that
reach into objects, decompression bombs and API keys."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from chat_stub import completion, explain_turn
from PIL import Image
from werkzeug import Response

from cbm.vlm.icl.datasets import ICLDataset
from cbm.vlm.icl.episodes import EpisodeGrid, load_episodes, make_episodes, save_episodes
from cbm.vlm.sealed import seal, unseal

#: PIL's own decompression-bomb limit as this process found it (nothing here may change it).
PIL_DEFAULT = Image.MAX_IMAGE_PIXELS

CONF = Path(__file__).resolve().parents[2] / "cbm" / "conf"
NAMES = [f"class{i}" for i in range(4)]
LABELS = np.repeat(np.arange(4), 6)  # 4 classes x 6 items
GRID = EpisodeGrid(n_ways=[2, 3], k_shots=[1], reps_times_n=6)  # 3 + 2 episodes


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims ``width`` x ``height`` pixels in a few dozen bytes (a decompression bomb)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")


def prompts(name: str) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml").prompts)


# ------------------------------------------------------------------ episodes files
@pytest.fixture
def toy(tmp_path):
    """A toy dataset, its episodes and their saved file."""
    ds = ICLDataset("toy", NAMES, LABELS, lambda i: None, {"kind": "toy"})
    eps = make_episodes("toy", LABELS, NAMES, GRID)
    path = tmp_path / "toy.json"
    save_episodes(path, eps, GRID, ds.fingerprint)
    return ds, eps, path


def _other_class_item(d: dict) -> int:
    """An item whose class is not one of the first episode's classes."""
    return next(i for i in range(len(LABELS)) if NAMES[LABELS[i]] not in d["episodes"][0]["classes"])


def _shown_label_swap(d: dict) -> None:
    """Swap the shown labels of the first episode's support shots (a consistent-looking edit)."""
    e = d["episodes"][0]
    e["support"][0]["label"], e["support"][1]["label"] = e["support"][1]["label"], e["support"][0]["label"]


TAMPER = [  # (name, edit of the file's body, the problem the resealed file is refused for)
    ("negative_index", lambda d: d["episodes"][0]["support"][0].update(index=-1), "support index -1 is outside the dataset (0..23)"),
    ("index_out_of_range", lambda d: d["episodes"][0]["support"][0].update(index=24), "support index 24 is outside the dataset (0..23)"),
    ("query_is_support", lambda d: d["episodes"][0]["query"][0].update(d["episodes"][0]["support"][0]),
     "an item is used twice (support and query must be disjoint)"),
    ("label_changed", _shown_label_swap, "do not match the dataset and the episode"),
    ("true_class_changed", lambda d: d["episodes"][0]["support"][0].update(cls="class9"), "do not match the dataset and the episode"),
    ("item_of_another_class", lambda d: d["episodes"][0]["support"][0].update(index=_other_class_item(d)),
     "do not match the dataset and the episode"),
    ("classes_changed", lambda d: d["episodes"][0].update(classes=["class0", "class0"]), "are not 2 distinct classes of the dataset"),
    ("labels_renamed", lambda d: d["episodes"][0].update(labels=["a", "b"]), "labels ['a', 'b'] are not the class names"),
    ("episode_dropped", lambda d: d["episodes"].pop(), "1 episode(s) missing, e.g. n3-k1-r1"),
    ("episode_repeated", lambda d: d["episodes"].append(d["episodes"][0]), "not a repeated of this grid and dataset"),
    ("episode_of_other_dataset", lambda d: d["episodes"][0].update(dataset="other"), "not a cell of this grid and dataset"),
    ("empty_query", lambda d: d["episodes"][0].update(query=[]), "2 support and 0 query shots, expected 2 and 1"),
    ("index_as_text", lambda d: d["episodes"][0]["support"][0].update(index="3"), "episode 0: not an episode"),
    ("index_as_bool", lambda d: d["episodes"][0]["support"][0].update(index=True), "episode 0: not an episode"),
    ("episodes_not_a_list", lambda d: d.update(episodes=None), "'episodes' is not a list"),
]


@pytest.mark.parametrize("name, edit, problem", TAMPER, ids=[t[0] for t in TAMPER])
def test_a_tampered_episodes_file_is_refused_in_one_line(toy, name, edit, problem):
    ds, _, path = toy
    body = unseal(json.loads(path.read_text()))
    edit(body)
    path.write_text(json.dumps(body))  # the edit alone: the digest no longer matches
    with pytest.raises(ValueError) as err:
        load_episodes(path, GRID, ds)
    assert str(err.value) == f"{path}: episodes file changed since it was drawn (no matching sha256); delete it to redraw"
    path.write_text(json.dumps(seal(body)))  # the digest recomputed: the structure checks refuse it
    with pytest.raises(ValueError) as err:
        load_episodes(path, GRID, ds)
    line = str(err.value)
    assert line.startswith(f"{path}: ") and problem in line and line.endswith("; delete it to redraw") and "\n" not in line


@pytest.mark.parametrize(
    "content, problem",
    [("[1]", "episodes file changed since it was drawn"), ("{not json", "not JSON (line 1"), ("", "not JSON"),
     ('{"a": 1}', "episodes file changed since it was drawn"), ("[" * 100_000, "nested too deeply")],
    ids=["list", "not_json", "empty", "no_digest", "deep"],
)  # fmt: skip
def test_an_unreadable_episodes_file_is_refused_in_one_line(toy, content, problem):
    ds, _, path = toy
    path.write_text(content)
    with pytest.raises(ValueError, match="delete it to redraw") as err:
        load_episodes(path, GRID, ds)
    assert problem in str(err.value) and "\n" not in str(err.value)


def test_the_valid_file_is_accepted_and_a_recomputed_digest_changes_nothing(toy):
    ds, eps, path = toy
    assert [e.to_json() for e in load_episodes(path, GRID, ds)] == [e.to_json() for e in eps]
    d = json.loads(path.read_text())
    assert set(d) == {"version", "grid", "dataset", "episodes", "sha256"}
    resealed = seal({k: v for k, v in d.items() if k != "sha256"})
    assert resealed == d  # the same digest: nothing else in the file depends on it
    with pytest.raises(ValueError, match="episodes made for other settings"):
        load_episodes(path, EpisodeGrid(n_ways=[2, 3], k_shots=[1], reps_times_n=6, seed=1), ds)
    other = ICLDataset("toy", NAMES, LABELS, lambda i: None, {"kind": "toy", "v": 2})
    with pytest.raises(ValueError, match="episodes made for other settings"):
        load_episodes(path, GRID, other)


# ------------------------------------------------------------------ ICL trial records
ROBOT = {"kind": "robot", "class_by": "hand_subtype", "split": "test",
         "data": {"name": "robot", "image_size": 32, "n_train": 0, "n_calib": 0, "n_test": 60}}  # fmt: skip


#: How the ICL judge prompt (the paper's, Appendix A.2) opens.
ICL_JUDGE = "You are a fair LLM judge"


def icl_handler(req):
    text = json.loads(req.data)["messages"][-1]["content"][-1]["text"]
    if text.startswith(ICL_JUDGE):
        from cbm.vlm.icl.judge import METRICS

        return completion("".join(f"<{m}>4</{m}>" for m in METRICS))
    return completion("<response>1</response><features>- round head\n- star hands</features>")


def icl_cfg(tmp_path: Path, server):
    from cbm.vlm.icl.config import ICLConfig

    client = {"backend": "openai", "model": "stub", "base_url": server.url_for("/v1"), "cache_dir": str(tmp_path / "replies"),
              "max_retries": 0, "backoff_s": 0.0}  # fmt: skip
    return ICLConfig(output_dir=str(tmp_path / "run"), models={"vlm": client}, judge={**client, "model": "judge"},
                     datasets={"robot": ROBOT}, prompts=prompts("icl"), cache_dir=str(tmp_path / "cache"), progress=False,
                     conditions=["E1", "E3"], episodes={"n_ways": [2, 3], "k_shots": [1], "reps_times_n": 6, "anonymise": True})  # fmt: skip


def test_tampered_trial_records_are_redone_from_the_reply_cache(tmp_path, httpserver, caplog):
    """A record is a resume point: one that is unreadable, edited, another trial's, or of the wrong
    shape (even with a recomputed digest) is redone; a forged but well-formed one is rebuilt from
    its reply, so its falsified verdict does not reach the tables."""
    from cbm.vlm.icl.run import run

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(icl_handler)
    first = run(icl_cfg(tmp_path, httpserver))
    paths = sorted((tmp_path / "run" / "records").rglob("*.json"))
    assert len(paths) == 10 and all(unseal(json.loads(p.read_text())) is not None for p in paths)
    original = {p: p.read_text() for p in paths}
    body = lambda p: unseal(json.loads(original[p]))  # noqa: E731
    paths[0].write_text("[1]")
    paths[1].write_text(json.dumps(seal({**body(paths[1]), "reply": 5})))  # wrong type, digest recomputed
    paths[2].write_text(original[paths[3]])  # another trial's record, its digest valid
    paths[4].write_text(json.dumps({**json.loads(original[paths[4]]), "correct": not body(paths[4])["correct"]}))  # edited
    forged = {**body(paths[5]), "correct": not body(paths[5])["correct"]}
    forged["parsed"] = {**forged["parsed"], "response": "2"}
    paths[5].write_text(json.dumps(seal(forged)))  # well-formed and resealed: rebuilt from the reply
    paths[6].write_text(json.dumps(seal({**body(paths[6]), "judge": {"scores": "x"}})))
    paths[7].write_bytes(b"\xff\xfe\x00")  # not UTF-8
    sent = len(httpserver.log)
    again = run(icl_cfg(tmp_path, httpserver))
    assert len(httpserver.log) == sent  # every redone trial came from the reply cache
    assert again["tables"] == first["tables"] and again["records"] == first["records"]
    assert {p: p.read_text() for p in paths} == original  # rewritten exactly as they were
    assert sum("the trial is redone" in r.getMessage() for r in caplog.records) == 6  # the forged one was rebuilt silently


def icl_model_handler(req):
    """Like :func:`icl_handler`, but the model named ``other`` answers ``2``: a reused old reply shows."""
    body = json.loads(req.data)
    if body["messages"][-1]["content"][-1]["text"].startswith(ICL_JUDGE):
        return icl_handler(req)
    return completion(f"<response>{2 if body['model'] == 'other' else 1}</response><features>- round head</features>")


def sent_since(server, n: int) -> tuple[int, int]:
    """(answer requests, judge requests) the server got after its ``n``-th request."""
    texts = [json.loads(req.data)["messages"][-1]["content"][-1]["text"] for req, _ in server.log[n:]]
    return sum(not t.startswith(ICL_JUDGE) for t in texts), sum(t.startswith(ICL_JUDGE) for t in texts)


def with_vlm(cfg, **settings):
    from dataclasses import replace

    return replace(cfg, models={"vlm": {**cfg.models["vlm"], **settings}})


ANSWER_CHANGES = [  # (name, change of the config, the part the log line names)
    ("model", lambda cfg, server: with_vlm(cfg, model="other"), "models.vlm settings (endpoint, model or sampling)"),
    ("base_url", lambda cfg, server: with_vlm(cfg, base_url=server.url_for("/v2")), "models.vlm settings"),
    ("temperature", lambda cfg, server: with_vlm(cfg, temperature=0.5), "models.vlm settings"),
    ("prompt", lambda cfg, server: _prompts(cfg, query=cfg.prompts["query"] + " Be brief."), "prompts"),
]


def _prompts(cfg, **templates):
    from dataclasses import replace

    return replace(cfg, prompts={**cfg.prompts, **templates})


@pytest.mark.parametrize("name, change, part", ANSWER_CHANGES, ids=[c[0] for c in ANSWER_CHANGES])
def test_records_of_another_model_endpoint_or_prompt_are_redone(tmp_path, httpserver, caplog, name, change, part):
    """A rerun into the same output_dir with another model, endpoint, sampling or prompt asks every
    trial again (nothing old is reused), with one log line saying why."""
    from cbm.vlm.icl.run import run

    httpserver.expect_request(re.compile(r"/v[12]/chat/completions")).respond_with_handler(icl_model_handler)
    cfg = icl_cfg(tmp_path, httpserver)
    first = run(cfg)
    sent = len(httpserver.log)
    caplog.clear()
    again = run(change(cfg, httpserver))
    assert sent_since(httpserver, sent)[0] == 10  # every trial asked again
    assert all(a["made_by"] != b["made_by"] for a, b in zip(first["records"], again["records"]))
    if name == "model":
        assert {r["reply"][:22] for r in again["records"]} == {"<response>2</response>"}  # the new model's answers
    lines = [r.getMessage() for r in caplog.records if r.name == "cbm.vlm"]
    assert len(lines) == 1 and lines[0].startswith("icl: 10 trial record(s) made with other ") and part in lines[0]
    assert lines[0].endswith(")") and ": redone (e.g. " in lines[0]
    sent = len(httpserver.log)
    run(change(cfg, httpserver))  # the new records are this config's: resumed, not redone
    assert len(httpserver.log) == sent


def test_a_changed_judge_redoes_only_the_judge(tmp_path, httpserver, caplog):
    """Another rubric, then another judge model: the answers are kept, only the verdicts are asked again."""
    from dataclasses import replace

    from cbm.vlm.icl.run import run

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(icl_model_handler)
    cfg = icl_cfg(tmp_path, httpserver)
    first = run(cfg)
    strict = _prompts(cfg, rubric="Be strict.")
    for change, part in ((strict, "judge prompt, rubric or options"), (replace(strict, judge={**cfg.judge, "model": "judge2"}), "judge settings")):
        sent = len(httpserver.log)
        caplog.clear()
        again = run(change)
        assert sent_since(httpserver, sent) == (0, 5)  # the answers are kept, every verdict asked again (E1 is not judged)
        assert [r["reply"] for r in again["records"]] == [r["reply"] for r in first["records"]]
        (line,) = [r.getMessage() for r in caplog.records if r.name == "cbm.vlm"]
        assert line.startswith(f"icl: 5 trial record(s) whose judge was made with other {part}") and ": judge redone (e.g. " in line


def test_records_of_an_older_version_are_redone_with_their_own_message(tmp_path, httpserver, caplog):
    from cbm.vlm.icl.run import run

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(icl_handler)
    first = run(icl_cfg(tmp_path, httpserver))
    paths = sorted((tmp_path / "run" / "records").rglob("*.json"))
    original = {p: p.read_text() for p in paths}
    body = lambda p: unseal(json.loads(original[p]))  # noqa: E731
    for p in paths[:3]:  # written before digests existed
        p.write_text(json.dumps(body(p)))
    for p in paths[3:5]:  # written before records said what made them
        p.write_text(json.dumps(seal({k: v for k, v in body(p).items() if k != "made_by"})))
    sent = len(httpserver.log)
    caplog.clear()
    again = run(icl_cfg(tmp_path, httpserver))
    assert len(httpserver.log) == sent and again["records"] == first["records"]  # redone from the reply cache
    assert {p: p.read_text() for p in paths} == original
    lines = sorted(r.getMessage() for r in caplog.records if r.name == "cbm.vlm")
    assert [re.sub(r" \(e\.g\. .*\)$", "", m) for m in lines] == [
        "icl: 2 trial record(s) written by an older version (no settings fingerprint): redone",
        "icl: 3 trial record(s) written by an older version (no digest): redone"]


# ------------------------------------------------------------------ EDCT item records
EDCT_DATA = {"name": "robot", "n_train": 20, "n_calib": 0, "n_test": 12, "image_size": 32}


def edct_handler(req):
    msgs = json.loads(req.data)["messages"]
    if explain_turn(msgs):
        return completion("<explanation>Its feet and its mouth decide it.</explanation>")
    user = msgs[-1]["content"]
    text = next(p["text"] for p in user if p["type"] == "text")
    if any(p["type"] == "image_url" for p in user):
        return completion("<answer>Glorp</answer><explanation>Its feet and its mouth decide it.</explanation>")
    if "List up to" in text:
        return completion("<concept>feet</concept><concept>mouth</concept>")
    if "chronological chain" in text:
        return completion("".join(f"<edit><concept>{c}</concept><change>the {c}</change></edit>" for c in ("feet", "mouth")))
    if "Answer Consistency (AC)" in text:
        return completion("<ac>yes</ac><ef>yes</ef><score>4</score>")
    return Response("unexpected", status=400)


def edct_cfg(tmp_path: Path, server, **over):
    from cbm.vlm.edct.config import EDCTConfig

    client = {"backend": "openai", "model": "stub", "base_url": server.url_for("/v1"), "cache_dir": str(tmp_path / "replies"),
              "max_retries": 0, "backoff_s": 0.0}  # fmt: skip
    settings = dict(output_dir=str(tmp_path / "run"), vlm=client, llm=client, judge=client, prompts=prompts("edct"), data=EDCT_DATA,
                    cache_dir=str(tmp_path / "cache"), items={"n": 4}, workers=1, progress=False)  # fmt: skip
    return EDCTConfig(**{**settings, **over})


def test_tampered_item_records_and_step_images_are_redone(tmp_path, httpserver, caplog):
    from cbm.vlm.edct.run import run

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(edct_handler)
    first = run(edct_cfg(tmp_path, httpserver))
    assert [r["status"] for r in first["records"]] == ["done"] * 4
    items = sorted((tmp_path / "run" / "items").iterdir())
    recs = [d / "record.json" for d in items]
    original = {p: p.read_text() for p in recs}
    assert all(unseal(json.loads(t)) is not None for t in original.values())
    recs[0].write_text("[1]")
    bad = unseal(json.loads(original[recs[1]]))
    bad["steps"][0]["judge"]["score"] = "5"  # a wrong type, the digest recomputed
    recs[1].write_text(json.dumps(seal(bad)))
    recs[2].write_text(original[recs[3]])  # another item's record
    unfinished = {**unseal(json.loads(original[recs[3]])), "status": "error", "error": "http: HTTP 500"}
    recs[3].write_text(json.dumps(seal(unfinished)))  # resumed: its finished steps are read back
    (items[3] / "step1.png").write_bytes(png_header_only(60_000, 60_000))  # a bomb in place of a step image
    sent = len(httpserver.log)
    again = run(edct_cfg(tmp_path, httpserver))
    assert len(httpserver.log) == sent  # the re-queries and verdicts came from the reply cache
    assert again["records"] == first["records"] and again["summary"]["ccs"] == first["summary"]["ccs"]
    assert {p: p.read_text() for p in recs} == original
    assert Image.open(items[3] / "step1.png").size == (32, 32)  # the step was made again, the bomb never decoded
    warned = [r.getMessage() for r in caplog.records if r.name == "cbm.vlm"]
    assert sum("the item is redone" in m for m in warned) == 3 and sum("the step is redone" in m for m in warned) == 1


def test_a_rerun_with_other_settings_is_refused_and_items_of_other_settings_are_redone(tmp_path, httpserver, caplog):
    """An EDCT output_dir is one run: a rerun with another VLM is refused in one line before any
    request; with run.json deleted (the way to redo a run's items) every item is asked again of the
    new model, nothing old reused, each record saying why."""
    from cbm.vlm.edct.records import read_run, run_id
    from cbm.vlm.edct.run import run

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(edct_handler)
    cfg = edct_cfg(tmp_path, httpserver)
    first = run(cfg)
    run_file = tmp_path / "run" / "run.json"
    files = {p: p.read_bytes() for p in (tmp_path / "run" / "items").rglob("*.*")}
    other = edct_cfg(tmp_path, httpserver, vlm={**cfg.vlm, "model": "other"}, prompts={**cfg.prompts, "judge": cfg.prompts["judge"] + " "})
    sent = len(httpserver.log)
    with pytest.raises(ValueError) as err:
        run(other)
    assert str(err.value) == (f"output_dir: {tmp_path / 'run'} holds a cbm-edct run made with other settings (vlm, prompts); choose "
                              f"another output_dir, or delete {run_file} to redo its items with these settings")  # fmt: skip
    assert len(httpserver.log) == sent and {p: p.read_bytes() for p in files} == files
    run_file.unlink()
    caplog.clear()
    again = run(other)
    models = [json.loads(req.data)["model"] for req, _ in httpserver.log[sent:]]
    assert models.count("other") == 2 * (4 + 8)  # every baseline and every re-query asked of the new model (two turns each)
    assert all(a["run"] != b["run"] for a, b in zip(first["records"], again["records"]))
    warned = [r.getMessage() for r in caplog.records if r.name == "cbm.vlm"]
    assert len(warned) == 4 and all(m.endswith(": made with other settings than this run's; the item is redone") for m in warned)
    assert {r["run"] for r in again["records"]} == {run_id(read_run(tmp_path / "run")["parts"])}  # run.json is the new run's
    sent = len(httpserver.log)
    assert run(other)["records"] == again["records"] and len(httpserver.log) == sent  # resumed as the new run's


def test_older_item_records_are_redone_and_forged_verdicts_derived_again(tmp_path, httpserver, caplog):
    from cbm.vlm.edct.run import run

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(edct_handler)
    first = run(edct_cfg(tmp_path, httpserver))
    recs = sorted((tmp_path / "run" / "items").glob("*/record.json"))
    original = {p: p.read_text() for p in recs}
    body = lambda p: unseal(json.loads(original[p]))  # noqa: E731
    recs[0].write_text(json.dumps(body(recs[0])))  # written before digests existed
    recs[1].write_text(json.dumps(seal({k: v for k, v in body(recs[1]).items() if k != "run"})))  # before run ids
    forged = body(recs[2])
    for step in forged["steps"]:  # a well-formed verdict the judge never gave, the digest recomputed
        step["judge"].update(ac=False, ef=False, score=9)
        step["answer_changed"] = True
    forged["chain"]["edits"][0]["change"] = "something else"
    forged["steps"][0]["instruction"]["change"] = "something else"
    recs[2].write_text(json.dumps(seal(forged)))
    caplog.clear()
    sent = len(httpserver.log)
    again = run(edct_cfg(tmp_path, httpserver))
    assert len(httpserver.log) == sent and again["records"] == first["records"]  # from the reply cache; the verdicts re-read
    assert again["summary"]["ccs_graded"] == first["summary"]["ccs_graded"]
    assert {p: p.read_text() for p in recs} == original
    warned = sorted(r.getMessage() for r in caplog.records if r.name == "cbm.vlm")
    assert warned == [f"edct: {recs[0]}: written by an older version (no digest); the item is redone",
                      f"edct: {recs[1]}: written by an older version (no settings fingerprint); the item is redone"]  # fmt: skip


# ------------------------------------------------------------------ the fine-tuning builder reads EDCT runs as cbm-edct does
@pytest.fixture
def edct_run(tmp_path, httpserver):
    """A finished 4-item EDCT run (the items' records and images) to export."""
    from cbm.vlm.edct.run import run

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(edct_handler)
    run(edct_cfg(tmp_path, httpserver))
    return tmp_path / "run"


def _reseal(path: Path, edit) -> None:
    body = unseal(json.loads(path.read_text()))
    edit(body)
    path.write_text(json.dumps(seal(body)))


BUILDER_TAMPER = [  # (name, what is done to the first item, the end of the one line it is refused with)
    ("record_edited", lambda d, rec: rec.write_text(rec.read_text().replace('"Glorp"', '"Drent"')), "record.json changed since cbm-edct wrote it"),
    ("index_path", lambda d, rec: _reseal(rec, lambda b: b["steps"][0].update(index="/../../../x")),
     "record.json changed since cbm-edct wrote it (not an EDCT item record)"),
    ("index_out_of_order", lambda d, rec: _reseal(rec, lambda b: b["steps"][1].update(index=7)),
     "record.json changed since cbm-edct wrote it (not an EDCT item record)"),
    ("index_bool", lambda d, rec: _reseal(rec, lambda b: b["steps"][0].update(index=True)),
     "record.json changed since cbm-edct wrote it (not an EDCT item record)"),
    ("no_digest", lambda d, rec: rec.write_text(json.dumps(unseal(json.loads(rec.read_text())))),
     "record.json was written by an older version of cbm-edct; rerun cbm-edct on @RUN (no digest)"),
    ("other_run", lambda d, rec: _reseal(rec, lambda b: b.update(run="0" * 64)),
     "record.json was made by another cbm-edct run than @RUN/run.json describes; rerun cbm-edct on @RUN"),
    ("step_image", lambda d, rec: (d / "step1.png").write_bytes((d / "step2.png").read_bytes()), "step1.png changed since cbm-edct wrote it"),
    ("mask_image", lambda d, rec: (d / "step2_mask.png").write_bytes((d / "step1_mask.png").read_bytes()), "step2_mask.png changed since cbm-edct wrote it"),
    ("original_image", lambda d, rec: (d / "original.png").unlink(), "original.png changed since cbm-edct wrote it"),
    ("step_image_link", lambda d, rec: ((d / "step1.png").unlink(), (d / "step1.png").symlink_to("/etc/hostname")),
     "step1.png changed since cbm-edct wrote it"),
]  # fmt: skip


@pytest.mark.parametrize("name, tamper, problem", BUILDER_TAMPER, ids=[t[0] for t in BUILDER_TAMPER])
def test_the_finetuning_builder_refuses_a_changed_edct_run_in_one_line(edct_run, name, tamper, problem):
    from cbm.vlm.finetune.builders import edct_pairs

    assert len(edct_pairs(edct_run)) == 4 * 2 * 2  # the run as written exports every judged step
    d = sorted((edct_run / "items").iterdir())[0]
    tamper(d, d / "record.json")
    with pytest.raises(ValueError) as err:
        edct_pairs(edct_run)
    line = str(err.value)
    assert line.startswith("data.source.run_dir: ") and line.endswith(problem.replace("@RUN", str(edct_run))) and "\n" not in line


def test_the_finetuning_builder_reads_step_images_under_the_pixel_limit(edct_run):
    import hashlib

    from cbm.vlm.finetune.builders import edct_pairs

    d = sorted((edct_run / "items").iterdir())[0]
    bomb = png_header_only(60_000, 60_000)
    (d / "step1.png").write_bytes(bomb)  # a bomb whose sha256 a forger wrote into the resealed record
    _reseal(d / "record.json", lambda b: b["steps"][0].update(image_sha256=hashlib.sha256(bomb).hexdigest()))
    with pytest.raises(ValueError, match="step1.png") as err:
        edct_pairs(edct_run)
    assert str(err.value).startswith("data.source.run_dir: ") and "refused undecoded" in str(err.value)
    with pytest.raises(ValueError, match="more than max_image_pixels=100 "):
        edct_pairs(edct_run, max_image_pixels=100)  # every image is read under the limit


# ------------------------------------------------------------------ targets that must never be called
TARGETS = '''
from pathlib import Path

import numpy as np

from cbm.vlm.verify import Segmenter, segmenter_factory


def write_marker(path, **kwargs):
    """Would prove it ran: a plain function named as a target must never be called."""
    Path(path).write_text("ran")


class Square(Segmenter):
    def __init__(self, size=4):
        self.size = size

    def mask(self, image, concept):
        m = np.zeros((image.height, image.width), bool)
        m[: self.size, : self.size] = True
        return m


@segmenter_factory
def marked_square(size=4):
    return Square(size)


class NoMask:
    pass


class Duck:
    """A mask method, but not a Segmenter: a class of another kind is never built."""
    def __init__(self, path, **kwargs):
        Path(path).write_text("ran")

    def mask(self, image, concept):
        return np.ones((image.height, image.width), bool)


class Boom(Segmenter):
    def mask(self, image, concept):
        raise RuntimeError("boom")


class WrongShape(Segmenter):
    def mask(self, image, concept):
        return np.zeros((3, 3), bool)
'''


@pytest.fixture
def targets(tmp_path, monkeypatch):
    (tmp_path / "hostile_targets.py").write_text(TARGETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path / "MARKER"


@pytest.mark.parametrize(
    "target, kind",
    [("hostile_targets:write_marker", "is a function"), ("os:system", "is a builtin_function_or_method"),
     ("builtins:eval", "is a builtin_function_or_method"), ("subprocess:run", "is a function"), ("os:path", "is a module"),
     ("hostile_targets:NoMask", "is a class, not"), ("hostile_targets:Duck", "is a class, not"),
     ("cbm.vlm.verify:Segmenter", "is the base class itself"), ("builtins:print", "is a builtin_function_or_method")],
)  # fmt: skip
def test_a_plain_function_target_is_refused_uncalled(targets, tmp_path, httpserver, target, kind):
    from cbm.vlm.edct.pipeline import load_segmenter
    from cbm.vlm.verify import resolve_segmenter

    spec = {"target": target, "kwargs": {"path": str(targets)}}
    with pytest.raises(ValueError, match="not a Segmenter class or a factory marked") as err:
        resolve_segmenter(target)
    assert kind in str(err.value) and str(err.value).endswith("it was not called")
    line = re.escape(f"segmenter.target: '{target}' {kind}")
    with pytest.raises(ValueError, match=line):
        edct_cfg(tmp_path, httpserver, segmenter=spec)
    with pytest.raises(ValueError, match=line):
        load_segmenter(spec)
    assert not targets.exists()


def test_segmenter_classes_and_marked_factories_are_built(targets, tmp_path, httpserver):
    from cbm.vlm.edct.pipeline import load_segmenter

    for target in ("hostile_targets:Square", "hostile_targets:marked_square"):
        edct_cfg(tmp_path, httpserver, segmenter={"target": target, "kwargs": {"size": 3}})
        seg = load_segmenter({"target": target, "kwargs": {"size": 3}})
        assert seg.mask(Image.new("RGB", (8, 8)), "feet").sum() == 9
    with pytest.raises(ValueError, match=r"segmenter.kwargs: unknown setting\(s\) \['colour'\] \(known: size\)"):
        edct_cfg(tmp_path, httpserver, segmenter={"target": "hostile_targets:Square", "kwargs": {"colour": 1}})


def test_a_failing_segmenter_stops_its_chain_not_the_run(targets, tmp_path, httpserver):
    from cbm.vlm.edct.run import run

    def same_image(req):
        return Response(json.dumps({"created": 0, "data": [{"b64_json": base64.b64encode(req.files["image"].read()).decode()}]}),
                        content_type="application/json")  # fmt: skip

    httpserver.expect_request("/v1/images/edits", method="POST").respond_with_handler(same_image)
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(edct_handler)
    editor = {"kind": "hosted", "base_url": httpserver.url_for("/v1"), "max_retries": 0}
    for target, reason in (("hostile_targets:Boom", "segmenter failed: RuntimeError: boom"),
                           ("hostile_targets:WrongShape", "segmenter returned a mask of shape [3, 3], expected [32, 32]")):  # fmt: skip
        out = run(edct_cfg(tmp_path, httpserver, output_dir=str(tmp_path / target), items={"n": 2}, editor=editor, segmenter={"target": target}))
        assert [(r["status"], [(s["status"], s["reason"]) for s in r["steps"]]) for r in out["records"]] == [("done", [("stopped", reason)])] * 2


def test_the_cli_never_calls_a_function_target(targets, tmp_path):
    """Through the real entry point: the helper that would write the marker is named as the
    segmenter; the command refuses in one line and the marker is absent."""
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "CBM_CACHE_DIR": str(tmp_path / "cache")}
    loop = [f"{r}.base_url=http://127.0.0.1:9/v1" for r in ("vlm", "llm", "judge")]
    seg = f"segmenter={{target: 'hostile_targets:write_marker', kwargs: {{path: '{targets}'}}}}"
    res = subprocess.run([sys.executable, "-m", "cbm.vlm.apps.edct", *loop, seg], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)  # fmt: skip
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr[-2000:]
    assert res.stderr.startswith("cbm-edct: error: segmenter.target: 'hostile_targets:write_marker' is a function")
    assert not targets.exists()


def test_a_torchvision_name_that_is_not_a_dataset_class_is_never_called(tmp_path, monkeypatch):
    import torchvision.datasets as tvd

    from cbm.vlm.icl.datasets import make_dataset

    marker = tmp_path / "MARKER"
    monkeypatch.setattr(tvd, "hostile", lambda root, **kw: marker.write_text("ran"), raising=False)
    for name, kind in (("hostile", "is a function"), ("utils", "is a module"), ("_bad", "must be the name of"),
                       ("NoSuch", "cannot import")):
        with pytest.raises(ValueError, match=kind) as err:
            make_dataset("t", {"kind": "torchvision", "name": name, "root": str(tmp_path)})
        assert "\n" not in str(err.value)
    assert not marker.exists()


# ------------------------------------------------------------------ templates
@pytest.mark.parametrize(
    "text, problem",
    [("{}", "'{}' is a positional placeholder"), ("a {0} b", "'{0}' is a positional placeholder"),
     ("{options.__class__.__mro__}", "is not a plain placeholder name"), ("{options[0]}", "is not a plain placeholder name"),
     ("{options!r}", "has a conversion or format spec"), ("{options:{options}}", "has a conversion or format spec"),
     ("{ options}", "is not a plain placeholder name"), ("{", "bad template"), ("}", "bad template"), ("{secret}", "unknown placeholder")],
)  # fmt: skip
def test_templates_take_only_plain_named_placeholders(tmp_path, httpserver, text, problem):
    from cbm.vlm.templates import check_template

    with pytest.raises(ValueError, match="^prompts.query: ") as err:
        check_template("query", text, ("options", "instruction"))
    assert problem in str(err.value)
    check_template("query", "Options: {options}. {{literal}} {instruction}", ("options", "instruction"))
    p = prompts("edct")
    with pytest.raises(ValueError, match=f"^prompts.answer: .*{problem.split()[-1]}"):
        edct_cfg(tmp_path, httpserver, prompts={**p, "answer": text.replace("options", "question")})
    from cbm.vlm.icl.config import check_prompts

    icl = prompts("icl")
    with pytest.raises(ValueError, match="^prompts.instructions.E2: "):
        check_prompts({**icl, "instructions": {**icl["instructions"], "E2": text}}, ["E1", "E2"])


# ------------------------------------------------------------------ images and keys
def test_images_are_checked_before_decoding(tmp_path):
    from cbm.vlm.images import check_image_file, load_image

    bomb = png_header_only(10_000, 10_000)  # under PIL's own limit: ours refuses it
    with pytest.raises(ValueError, match=r"^x: 10000x10000 image has 100,000,000 pixels, more than max_image_pixels=1,000 \(refused undecoded\)$"):
        load_image(bomb, 1000, "x")
    with pytest.raises(ValueError, match=r"^x: 100000x100000 image has 10,000,000,000 pixels, more than max_image_pixels=100,000,000"):
        load_image(png_header_only(100_000, 100_000), 10**8, "x")  # over PIL's own limit too: still its size, never decoded
    with pytest.raises(ValueError, match="image larger than PIL's limit"):
        load_image(png_header_only(100_000, 100_000), 10**11, "x")  # a limit over PIL's (Python callers): PIL's refusal stands
    buf = io.BytesIO()
    Image.new("RGB", (40, 40), (9, 9, 9)).save(buf, format="PNG")
    assert load_image(buf.getvalue(), 1600, "x").size == (40, 40)
    with pytest.raises(ValueError, match="x: cannot decode the image"):
        load_image(buf.getvalue()[:70], 1600, "x")
    with pytest.raises(ValueError, match="x: cannot read the image"):
        load_image(b"not an image", 1600, "x")
    (tmp_path / "d.png").mkdir()
    with pytest.raises(ValueError, match="x: cannot read the image"):
        check_image_file(tmp_path / "d.png", 1600, "x")
    assert Image.MAX_IMAGE_PIXELS == PIL_DEFAULT  # PIL's own bomb check was never changed


def test_a_hosted_edit_that_returns_a_bomb_is_refused_undecoded(httpserver):
    from cbm.vlm.editors import EditError, EditInstruction, EditItem, HostedImageEditor

    b64 = base64.b64encode(png_header_only(10_000, 10_000)).decode()
    httpserver.expect_request("/v1/images/edits").respond_with_json({"created": 0, "data": [{"b64_json": b64}]})
    editor = HostedImageEditor("m", base_url=httpserver.url_for("/v1"), timeout=5, max_retries=0, max_image_pixels=10**6)
    with pytest.raises(EditError, match="100,000,000 pixels, more than max_image_pixels=1,000,000"):
        editor.edit(EditItem(Image.new("RGB", (8, 8))), EditInstruction("feet"))


def test_a_hosted_editor_needs_its_key_before_any_work(tmp_path, httpserver, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match=r"^editor: the environment variable OPENAI_API_KEY is not set \(the API key of the image-edit endpoint https://api.openai.com/v1\)"):
        edct_cfg(tmp_path, httpserver, editor={"kind": "hosted"})
    with pytest.raises(ValueError, match="^editor.api_key: a key is never written in a config"):
        edct_cfg(tmp_path, httpserver, editor={"kind": "hosted", "api_key": "sk-1"})
    monkeypatch.setenv("EDIT_KEY", "sk-1")
    with pytest.raises(ValueError, match="refusing to send the API key in \\$EDIT_KEY in clear text"):
        edct_cfg(tmp_path, httpserver, editor={"kind": "hosted", "api_key_env": "EDIT_KEY", "base_url": "http://example.com/v1"})
    edct_cfg(tmp_path, httpserver, editor={"kind": "hosted", "api_key_env": "EDIT_KEY", "base_url": "https://example.com/v1"})
    assert not (tmp_path / "run").exists()  # nothing was built or written


# ------------------------------------------------------------------ typed settings
def test_settings_of_the_wrong_type_are_one_line(tmp_path, httpserver):
    from cbm.core.validation import conforms

    cases = [({"k": "2"}, "k: must be an integer, got str '2'"), ({"k": True}, "k: must be an integer, got bool True"),
             ({"items": {"n": 2.5}}, "items.n: must be an integer, got float 2.5"), ({"items": [1]}, "items: must be a mapping of settings, got list [1]"),
             ({"options": ["a", 1]}, "options: must be a list of strings or null, got list ['a', 1]"), ({"workers": float("inf")}, "workers: must be an integer, got float inf"),
             ({"bootstrap": {"confidence": float("nan")}}, "bootstrap.confidence: must be a number, got float nan"),
             ({"verify_retries": None}, "verify_retries: must be an integer, got NoneType None")]  # fmt: skip
    for over, line in cases:
        with pytest.raises(ValueError) as err:
            edct_cfg(tmp_path, httpserver, **over)
        assert str(err.value) == line
    assert conforms({"a": [1, 2]}, {"a": [int], "?b": str}) and not conforms({"a": [True]}, {"a": [int]})
    assert not conforms([1], {"a": int}) and conforms({"a": 1.5}, {"a": float}) and not conforms({"a": None}, {"a": str})
    assert not conforms(float("nan"), float) and not conforms([1.0, float("-inf")], [float]) and conforms(3, float)
