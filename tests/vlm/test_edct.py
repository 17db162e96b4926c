"""EDCT end to end on synthetic robots: a scripted loopback endpoint whose VLM answers by the
label rule (looking each image up, counterfactuals included) gives exactly the CCS the ground
truth predicts; a failing judge leaves resumable records; the tiny local VLM (option scoring)
with a scripted LLM/judge produces the table with CIs. Also the parsers and the statistics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from chat_stub import completion, explain_turn
from werkzeug import Response

from cbm.vlm.edct.config import EDCTConfig
from cbm.vlm.edct.metrics import bootstrap_mean, summarise, wilson
from cbm.vlm.edct.parse import parse_answer, parse_concepts, parse_edit_chain, parse_verdict
from cbm.vlm.edct.run import run
from cbm.vlm.messages import decode_image_part

DATA = {"name": "robot", "n_train": 20, "n_calib": 0, "n_test": 12, "image_size": 32}
CONF = Path(__file__).resolve().parents[2] / "cbm" / "conf" / "edct.yaml"
CHAIN = ("feet", "mouth")


def prompts() -> dict[str, str]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONF).prompts)


def chain_truth(items, editor, concepts, label, key: str) -> tuple[dict[bytes, str], list[list[bool]]]:
    """Every original and counterfactual image (``concepts`` edited in order, as the scripted
    chain asks) -> its true class; and per item, whether each step flips the original's class.
    ``key`` names the meta entry the label reads (robot ``row``, Sudoku ``board``)."""
    from cbm.vlm.editors import EditInstruction, EditItem

    table, flips = {}, []
    for item in items:
        first = label(item.meta[key])
        table[item.array.tobytes()] = first
        cur, row_flips = item, []
        for concept in concepts:
            res = editor.edit(cur, EditInstruction(concept))
            table[np.asarray(res.image).tobytes()] = label(res.meta[key])
            row_flips.append(label(res.meta[key]) != first)
            cur = EditItem(res.image, res.meta, item.kind)
        flips.append(row_flips)
    return table, flips


def expected_chain(n: int, cache: Path) -> tuple[dict[bytes, str], list[list[bool]]]:
    """:func:`chain_truth` of the first ``n`` test robots under the label rule."""
    from cbm.vlm.editors import RobotEditor, robot_items
    from synthetic.registry import data_config
    from synthetic.robot import CLASS_NAMES, glorp_probability
    from synthetic.robot.attributes import attribute_table

    cfg = data_config(DATA)

    def label(row: np.ndarray) -> str:
        return CLASS_NAMES[int(glorp_probability(attribute_table(np.asarray(row)[None]), cfg)[0] > 0.5)]

    return chain_truth(robot_items(cfg, "test", np.arange(n), cache_dir=str(cache)), RobotEditor(cfg), CHAIN, label, "row")


def scripted(table: dict[bytes, str] | None, fail_judge: dict | None = None):
    """A chat endpoint playing every EDCT role: the VLM answers by the label rule, the LLM cites
    feet and mouth, the judge calls AC 'yes' exactly when the answer changed."""

    def handler(req):
        msgs = json.loads(req.data)["messages"]
        if explain_turn(msgs):
            return completion("<explanation>Its feet and its mouth decide it.</explanation>")
        user = msgs[-1]["content"]
        text = next(p["text"] for p in user if p["type"] == "text")
        image = next((p for p in user if p["type"] == "image_url"), None)
        if image is not None:
            label = table[np.asarray(decode_image_part(image).convert("RGB")).tobytes()] if table is not None else "Glorp"
            return completion(f"<answer>{label}</answer><explanation>Its feet and its mouth decide it.</explanation>")
        if "List up to" in text:
            return completion("<concept>feet</concept>\n<concept>the mouth</concept>")
        if "chronological chain" in text:
            return completion("".join(f'<edit index="{i}"><concept>{c}</concept><keep>everything else</keep><change>the {c}</change>'
                                      f"<how>redraw it</how><constraints>nothing else</constraints></edit>" for i, c in enumerate(CHAIN, 1)))  # fmt: skip
        if "Answer Consistency (AC)" in text:
            if fail_judge is not None and fail_judge["on"]:
                return Response("judge down", status=500)
            before = re.search(r"Original answer: (\w+)", text).group(1)
            after = re.search(r"Answer after the edit: (\w+)", text).group(1)
            ac = "yes" if before != after else "no"
            return completion(f"<ac>{ac}</ac><ef>yes</ef><score>{5 if ac == 'yes' else 2}</score>")
        return Response("unexpected prompt", status=400)

    return handler


def make_cfg(tmp_path: Path, server, out: str = "run", **over) -> EDCTConfig:
    client = {"backend": "openai", "model": "scripted", "base_url": server.url_for("/v1"), "cache_dir": str(tmp_path / "replies"),
              "max_retries": 0, "backoff_s": 0.0}  # fmt: skip
    settings = dict(output_dir=str(tmp_path / out), vlm=client, llm=client, judge=client, prompts=prompts(), data=DATA,
                    cache_dir=str(tmp_path / "cache"), items={"n": 8}, workers=2, progress=False)  # fmt: skip
    settings.update(over)
    return EDCTConfig(**settings)


def test_scripted_run_gives_the_ground_truth_ccs(tmp_path, httpserver):
    table, flips = expected_chain(8, tmp_path / "cache")
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(scripted(table))
    out = run(make_cfg(tmp_path, httpserver))
    s, records = out["summary"], out["records"]
    assert [r["status"] for r in records] == ["done"] * 8
    assert [[st["known_change"] for st in r["steps"]] for r in records] == flips
    assert all(st["answer_changed"] == st["known_change"] for r in records for st in r["steps"])  # an oracle VLM
    per_item = [float(np.mean(f)) for f in flips]
    assert s["ccs"].value == pytest.approx(np.mean(per_item)) and s["ccs"].n == 8
    assert s["ccs"].low <= s["ccs"].value <= s["ccs"].high
    n_flip = sum(map(sum, flips))
    assert 0 < n_flip < 16, "the items must include label-flipping and label-keeping edits"
    assert s["pcs"].value == 1.0 and s["pcs"].n == n_flip and s["ncc"].value == 0.0 and s["ncc"].n == 16 - n_flip
    assert s["ccs_known_change"].value == 1.0 and s["ccs_known_no_change"].value == 0.0
    assert s["answer_follows_truth"].value == 1.0 and s["answer_follows_truth"].n == 16
    assert s["ccs_graded"].value == pytest.approx(np.mean([np.mean([1.0 if f else 0.25 for f in fl]) for fl in flips]))
    # as the paper reports them: AC and EF over items (this oracle judge: AC = the answer changed, EF always)
    assert s["ac_items"].value == pytest.approx(np.mean(per_item)) and s["ef_items"].value == 1.0 and s["ac_items"].n == 8
    assert [(row["k"], row["steps"]) for row in s["by_k"]] == [(1, 8), (2, 8)]
    for k, row in enumerate(s["by_k"]):
        assert row["ccs"].value == pytest.approx(np.mean([f[k] for f in flips])) and row["ef"].value == 1.0
    steps = [st for r in records for st in r["steps"]]
    assert all(st["verify"]["in_ratio"] >= 0 for st in steps) and all(st["changed"]["part"] == c for st, c in zip(steps, CHAIN * 8))
    # the exact judge beside it: this oracle VLM's answers are the rule's labels (AC 1 on every step), but
    # "its feet and its mouth" states no part's value (EF 0): the exact CCS is 0 where the LLM judge gave EF 'yes'
    assert s["ac_exact"].value == 1.0 and s["ef_exact"].value == 0.0 and s["ccs_exact"].value == 0.0 and s["ccs_exact"].n == 8
    assert s["judge_vs_exact"].value == 0.0 and s["judge_vs_exact"].n == 16
    d = tmp_path / "run"
    md = (d / "results.md").read_text()
    assert "CCS [95% CI]" in md and "| 8 / 8 | 16 |" in md and "CCS, exact judge*" in md and "Cohen's kappa, judge vs exact" in md
    res = json.loads((d / "results.json").read_text())
    assert res["scores"]["ccs"]["value"] == pytest.approx(s["ccs"].value) and res["parse_errors"] == {}
    assert (d / "items" / "robot-test-00000" / "step2.png").is_file() and (d / "items" / "robot-test-00000" / "step2_mask.png").is_file()
    # (8 baselines + 16 re-queries) x 2 turns + 8 extractions + 8 chains + 16 verdicts, identical prompts sent once
    texts = [json.loads(req.data)["messages"][-1]["content"][-1]["text"] for req, _ in httpserver.log]
    u = res["usage"]["vlm"]
    assert u["requests"] == len(texts) and u["requests"] + u["cache_hits"] == 2 * (8 + 16) + 8 + 8 + 16
    assert sum("Give your answer" in t for t in texts) == 8 + 16  # every image is new
    # the paper's two turns: turn 2 asks for the explanation after turn 1's reply, kept as the assistant turn
    turn2 = [json.loads(req.data)["messages"] for req, _ in httpserver.log if "Explain your answer" in json.dumps(req.data.decode())]
    assert len(turn2) == 8 + 16
    for msgs in turn2:
        assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
        assert msgs[0]["content"][0]["type"] == "image_url" and msgs[0]["content"][-1]["text"].endswith("in <answer></answer>.")
        label = re.search(r"<answer>(\w+)</answer>", msgs[1]["content"]).group(1)
        assert msgs[1]["content"] == f"<answer>{label}</answer><explanation>Its feet and its mouth decide it.</explanation>"
        assert msgs[2]["content"] == [{"type": "text", "text": prompts()["explain"]}]
    rec0 = records[0]["baseline"]
    assert rec0["turns"] == 2 and rec0["explanation"] == "Its feet and its mouth decide it." and rec0["reply"].startswith("<answer>")
    assert rec0["explain"]["reply"] == "<explanation>Its feet and its mouth decide it.</explanation>"
    # the run exports as counterfactual fine-tuning rows with the true labels as answers
    from cbm.vlm.finetune.builders import edct_pairs

    rows = edct_pairs(d)
    assert len(rows) == 2 * 16 and [r.split for r in rows[:2]] == ["original", "counterfactual"]
    truth = {r["id"]: r for r in records}
    for o, c in zip(rows[::2], rows[1::2]):
        rec = truth[o.meta["edct_item"]]
        step = rec["steps"][int(o.pair_id.rsplit("step", 1)[1]) - 1]
        assert (o.answer, c.answer) == (rec["truth"], step["truth"]) and o.question == rec["question"] and Path(c.mask).is_file()


def test_failed_judge_is_recorded_and_the_rerun_resumes(tmp_path, httpserver):
    table, _ = expected_chain(4, tmp_path / "cache")
    fail = {"on": True}
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(scripted(table, fail))
    first = run(make_cfg(tmp_path, httpserver, items={"n": 4}))
    assert [r["status"] for r in first["records"]] == ["error"] * 4
    assert all(r["error"].startswith("http: HTTP 500") for r in first["records"])
    assert first["summary"]["steps_judged"] == 0
    sent = len(httpserver.log)
    fail["on"] = False
    again = run(make_cfg(tmp_path, httpserver, items={"n": 4}))
    assert [r["status"] for r in again["records"]] == ["done"] * 4
    new = [json.loads(req.data)["messages"][-1]["content"][-1]["text"] for req, _ in httpserver.log[sent:]]
    # the first run stopped at each item's first verdict: the rerun sends the verdicts and the second
    # step's re-queries, nothing else (baselines, concepts, chains are in the records; the first
    # re-queries in the reply cache; identical verdict prompts go out once)
    assert sum("Give your answer" in t for t in new) == 4 and sum("Explain your answer" in t for t in new) == 4  # two turns each
    assert all("Give your answer" in t or "Explain your answer" in t or "Answer Consistency (AC)" in t for t in new)
    assert again["summary"]["steps_judged"] == 8


def test_tiny_local_vlm_with_scripted_llm_and_judge(tmp_path, httpserver):
    from cbm.vlm.tiny import build_tiny_vlm

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(scripted(None))
    model = build_tiny_vlm(tmp_path / "tiny")
    cfg = make_cfg(tmp_path, httpserver, vlm={"backend": "local", "model": str(model), "cache_dir": str(tmp_path / "replies"), "max_tokens": 24},
                   answer_by="score", items={"n": 6})  # fmt: skip
    out = run(cfg)
    recs = out["records"]
    assert [r["status"] for r in recs] == ["done"] * 6
    assert all(r["baseline"]["answer"] in ("Drent", "Glorp") for r in recs)
    s = out["summary"]
    assert s["steps_judged"] == 12 and s["ccs"].n == 6 and not np.isnan(s["ccs"].value)
    md = (tmp_path / "run" / "results.md").read_text()
    assert "CCS [95% CI]" in md and "| 6 / 6 | 12 |" in md
    usage = json.loads((tmp_path / "run" / "usage.json").read_text())
    assert usage["vlm"]["model"] == str(model) and usage["vlm"]["requests"] == 6 + 12  # turn 2 (scoring is no request)
    # with two turns the scored option is turn 1's reply, turn 2 explains it in the same conversation
    assert all(r["baseline"]["reply"] == f"<answer>{r['baseline']['answer']}</answer>" and len(r["baseline"]["scores"]) == 2
               and r["baseline"]["turns"] == 2 and r["baseline"]["explain"]["reply"].startswith("<explanation>") for r in recs)  # fmt: skip
    assert usage["llm"]["requests"] + usage["llm"]["cache_hits"] == 6 * 2 + 12  # extraction + chain per item, a verdict per step


def test_cli_runs_and_rejects_bad_input_in_one_line(tmp_path, httpserver):
    import os
    import subprocess
    import sys

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(scripted(None))
    exe = [sys.executable, "-m", "cbm.vlm.apps.edct"]
    roles = [f"{r}.{k}={v}" for r in ("vlm", "llm", "judge") for k, v in
             (("model", "scripted"), ("base_url", httpserver.url_for("/v1")), ("cache_dir", tmp_path / "replies"))]  # fmt: skip
    data = [f"data.{k}={v}" for k, v in DATA.items() if k != "name"]
    env = {**os.environ, "CBM_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "cli"
    done = subprocess.run([*exe, *roles, *data, "items.n=3", f"hydra.run.dir={out}"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CCS [95% CI]" in done.stdout + done.stderr and (out / "results.md").is_file()
    res = json.loads((out / "results.json").read_text())
    assert res["status"] == {"item_done": 3, "step_judged": 6}
    from cbm.tracking.offline import runs_under  # the command line logs to W&B offline (job type edct)

    (wb,) = runs_under(out)
    assert wb.job_type == "edct" and wb.exit_code == 0 and wb.config["items"]["n"] == 3 and wb.config["run"]["command"] == "cbm-edct"
    assert wb.summary["scores/ccs/value"] == pytest.approx(res["scores"]["ccs"]["value"])
    bad = subprocess.run([*exe, *roles, "items.n=0"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip() == "cbm-edct: error: items.n: must be >= 1, got 0"


# ----------------------------------------------------------------------------- parsers and statistics
def test_parsers_record_error_kinds():
    a = parse_answer("<answer>glorp.</answer><explanation>pointy feet</explanation>", ["Drent", "Glorp"])
    assert (a.answer, a.explanation, a.errors) == ("Glorp", "pointy feet", [])
    b = parse_answer("<answer>Blob</answer><explanation>x", ["Drent", "Glorp"])  # an unclosed explanation is read to its end
    assert b.answer is None and b.explanation == "x" and [e.kind for e in b.errors] == ["not_in_options"]
    assert parse_concepts("<concept>Feet</concept><concept>feet </concept><concept>mouth</concept><concept>eyes</concept>", 2) == (["Feet", "mouth"], [])
    assert [e.kind for e in parse_concepts("no tags here", 2)[1]] == ["missing"]
    assert parse_concepts("<none/>", 2) == ([], [])
    assert [e.kind for e in parse_concepts("<concept>feet</concept><concept>mouth", 2)[1]] == ["unclosed"]
    chain, errs = parse_edit_chain("<edit><keep>k</keep><change>c</change><how>h</how><constraints>x</constraints><target>pointy</target></edit>", ["feet", "mouth"])
    assert chain[0].concept == "feet" and chain[0].target == "pointy" and [e.kind for e in errs] == ["missing"]
    v = parse_verdict("<ac>Yes</ac><ef>no</ef><score>4</score>")
    assert (v.ac, v.ef, v.score, v.errors) == (True, False, 4, [])
    w = parse_verdict("<ac>maybe</ac><score>9</score>")
    assert w.ac is None and w.ef is None and w.score is None and sorted(e.kind for e in w.errors) == ["missing", "not_in_options", "not_in_options"]


def test_cohens_kappa_textbook():
    from cbm.vlm.edct.metrics import cohens_kappa

    # 50 items: both yes 20, a yes / b no 5, a no / b yes 10, both no 15: p_o = 0.7, p_e = 0.5, kappa = 0.4
    a = [True] * 25 + [False] * 25
    b = [True] * 20 + [False] * 5 + [True] * 10 + [False] * 15
    assert cohens_kappa(a, b) == pytest.approx(0.4)
    assert cohens_kappa(a, a) == 1.0 and cohens_kappa(a, [not x for x in a]) == pytest.approx(-1.0)
    assert cohens_kappa([True, True], [True, True]) == 1.0 and np.isnan(cohens_kappa([], []))


def test_statistics():
    e = wilson(8, 10)
    assert e.value == 0.8 and e.low == pytest.approx(0.4902, abs=1e-4) and e.high == pytest.approx(0.9433, abs=1e-4)  # textbook Wilson 95%
    assert wilson(0, 0).n == 0 and wilson(0, 0).fmt() == "n/a"
    b = bootstrap_mean([0, 1] * 20, n_resamples=2000, seed=0)
    assert b.value == 0.5 and 0.3 < b.low < 0.5 < b.high < 0.7
    assert bootstrap_mean([0, 1] * 20, n_resamples=2000, seed=0) == b  # seeded: reproducible
    assert bootstrap_mean([1.0, 1.0]).low == 1.0 and np.isnan(bootstrap_mean([0.5]).low)

    def step(ac, ef, changed, known, score=3):
        return {"status": "judged", "judge": {"ac": ac, "ef": ef, "score": score}, "answer_changed": changed, "known_change": known,
                "requery": {"answer": "Glorp"}}  # fmt: skip

    recs = [{"steps": [step(True, True, True, True, 5), step(True, False, False, False, 1)]},
            {"steps": [step(False, True, False, True), {"status": "unscored"}]}, {"steps": []}]  # fmt: skip
    s = summarise(recs, n_resamples=200)
    # an item whose edit could not be verified (a stopped step) is in no score, its judged steps neither, counted by reason
    unverified = {"steps": [step(True, True, True, True, 5), {"status": "stopped", "excluded": "not_local"}]}
    out = summarise([*recs, unverified], n_resamples=200)
    assert (out["items"], out["items_scored"], out["steps_judged"], out["items_excluded"]) == (4, 2, 3, {"not_local": 1})
    assert out["ccs"] == s["ccs"] and s["items_excluded"] == {}
    unread = {**step(True, True, None, None), "requery": {"answer": None}}  # an unreadable re-query is never consistent
    assert summarise([*recs, {"steps": [unread]}], n_resamples=200)["items_scored"] == 2
    assert s["items_scored"] == 2 and s["steps_judged"] == 3
    assert s["ccs"].value == pytest.approx((0.5 + 0.0) / 2) and s["ccs_graded"].value == pytest.approx((0.5 + 0.5) / 2)
    assert s["pcs"].value == 1.0 and s["ncc"].value == 0.0 and s["ncc"].n == 2
    assert s["answer_follows_truth"].value == pytest.approx(2 / 3)
    assert "judge_agreement" not in s
    recs[0]["steps"][0]["judge2"] = {"ac": True, "ef": True}  # agrees
    recs[0]["steps"][1]["judge2"] = {"ac": True, "ef": True}  # disagrees on EF
    two = summarise(recs, n_resamples=200)
    agree = two["judge_agreement"]
    assert (agree.value, agree.n) == (0.5, 2) and agree.low == pytest.approx(wilson(1, 2).low)
    # item 0's two steps: judge AC·EF = 1, 0; judge2 = 1, 1 -> averaged 1, 0.5 (item mean 0.75); both 1, 0 (0.5)
    assert two["ccs_judges_mean"].value == pytest.approx(0.75) and two["ccs_judges_both"].value == pytest.approx(0.5)
    assert two["kappa_ac"] == 1.0 and two["kappa_ef"] == pytest.approx(0.0)  # EF: judge2 always yes, no agreement beyond chance
    assert s["ac_items"].value == pytest.approx((1.0 + 0.0) / 2) and s["ef_items"].value == pytest.approx((0.5 + 1.0) / 2)


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"answer_by": "score"}, "answer_by=score needs vlm.backend=local"),
        ({"k": 0}, "k: must lie in"),
        ({"editor": {"kind": "photoshop"}}, "editor.kind: unknown editor 'photoshop'"),
        ({"prompts": {**prompts(), "judge": "{question} {secret}"}}, r"prompts.judge: unknown placeholder\(s\) \['secret'\]"),
        ({"verify": {"tau_in": 2.0}}, "tau_in"),
        ({"judge": {"model": "m", "temprature": 0}}, r"judge: client: unknown setting"),
    ],
)
def test_bad_config_is_one_line(tmp_path, httpserver, over, match):
    with pytest.raises(ValueError, match=match) as e:
        make_cfg(tmp_path, httpserver, **over)
    assert "\n" not in str(e.value)


SEGMENTER = '''
import numpy as np

from cbm.vlm.verify import Segmenter


class Square(Segmenter):
    """Test segmenter: every concept lives in the square the scripted image editor paints."""
    def __init__(self, y0, x0, size):
        self.box = (y0, x0, size)

    def mask(self, image, concept):
        y0, x0, s = self.box
        m = np.zeros((image.height, image.width), bool)
        m[y0:y0 + s, x0:x0 + s] = True
        return m
'''


def test_hosted_editor_with_a_segmenter(tmp_path, httpserver, monkeypatch):
    import base64
    import io

    from PIL import Image

    box = (10, 12, 8)

    def edit_handler(req):
        img = np.asarray(Image.open(io.BytesIO(req.files["image"].read())).convert("RGB")).copy()
        y0, x0, s = box
        img[y0:y0 + s, x0:x0 + s] = (255, 255, 255) if "feet" in req.form["prompt"] else (255, 0, 255)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="PNG")
        return Response(json.dumps({"created": 0, "data": [{"b64_json": base64.b64encode(buf.getvalue()).decode()}]}), content_type="application/json")

    httpserver.expect_request("/v1/images/edits", method="POST").respond_with_handler(edit_handler)
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(scripted(None))
    (tmp_path / "square_seg.py").write_text(SEGMENTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    editor = {"kind": "hosted", "model": "edit-model", "base_url": httpserver.url_for("/v1")}  # loopback: no key needed
    out = run(make_cfg(tmp_path, httpserver, items={"n": 3}, editor=editor,
                       segmenter={"target": "square_seg:Square", "kwargs": {"y0": box[0], "x0": box[1], "size": box[2]}}))  # fmt: skip
    steps = [s for r in out["records"] for s in r["steps"]]
    assert [r["status"] for r in out["records"]] == ["done"] * 3 and len(steps) == 6
    assert all(s["mask_source"] == "segmenter" and s["verify"]["passed"] and s["verify"]["out_ratio"] == 0.0 for s in steps)
    assert all("known_change" not in s for s in steps)  # a free-form editor: no ground truth
    assert len([req for req, _ in httpserver.log if req.path.endswith("/images/edits")]) == 6
    mask = np.asarray(Image.open(tmp_path / "run" / "items" / "robot-test-00000" / "step1_mask.png")) > 0
    assert mask.sum() == box[2] ** 2
    with pytest.raises(ValueError, match="segmenter.target: cannot import 'square_seg:Nope'"):
        run(make_cfg(tmp_path, httpserver, out="bad", items={"n": 1}, editor=editor, segmenter={"target": "square_seg:Nope"}))


SUDOKU = {"name": "sudoku", "n_train": 20, "n_val": 4, "n_calib": 0, "n_test": 6, "cell_size": 18}
CELLS = ("row 1 column 1", "row 5 column 5")


def test_sudoku_boards_with_the_exact_digit_editor(tmp_path, httpserver):
    from cbm.vlm.editors import SudokuEditor, sudoku_items
    from synthetic.registry import data_config
    from synthetic.sudoku.checker import check_board

    cfg = data_config(SUDOKU)

    def label(board) -> str:
        return "valid" if bool(check_board(np.asarray(board)).all()) else "invalid"

    items = sudoku_items(cfg, "test", np.arange(6), cache_dir=str(tmp_path / "cache"))
    table, flips = chain_truth(items, SudokuEditor(cfg), CELLS, label, "board")

    def handler(req):
        msgs = json.loads(req.data)["messages"]
        if explain_turn(msgs):
            return completion("<explanation>The top-left cell and the centre cell decide it.</explanation>")
        user = msgs[-1]["content"]
        text = next(p["text"] for p in user if p["type"] == "text")
        image = next((p for p in user if p["type"] == "image_url"), None)
        if image is not None:
            ans = table[np.asarray(decode_image_part(image).convert("RGB")).tobytes()]
            return completion(f"<answer>{ans}</answer><explanation>The top-left cell and the centre cell decide it.</explanation>")
        if "List up to" in text:
            return completion("".join(f"<concept>{c}</concept>" for c in CELLS))
        if "chronological chain" in text:
            return completion("".join(f"<edit><concept>{c}</concept><change>the digit</change></edit>" for c in CELLS))
        before = re.search(r"Original answer: (\w+)", text).group(1)
        after = re.search(r"Answer after the edit: (\w+)", text).group(1)
        return completion(f"<ac>{'yes' if before != after else 'no'}</ac><ef>yes</ef><score>3</score>")

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(handler)
    from omegaconf import OmegaConf

    preset = OmegaConf.load(CONF.parent / "edct" / "sudoku.yaml")
    out = run(make_cfg(tmp_path, httpserver, data=SUDOKU, items={"source": "sudoku", "n": 6}, question=preset.question,
                       prompts={**prompts(), "extract": preset.prompts.extract}))  # fmt: skip
    recs = out["records"]
    assert [r["status"] for r in recs] == ["done"] * 6
    assert [[s["known_change"] for s in r["steps"]] for r in recs] == flips
    assert [r["truth"] for r in recs].count("valid") >= 1 and all(f[0] for f, r in zip(flips, recs) if r["truth"] == "valid")
    assert all(s["changed"]["checks"][0] in ("row1", "row5") and s["verify"]["passed"] for r in recs for s in r["steps"])
    assert out["summary"]["ccs"].value == pytest.approx(np.mean([np.mean(f) for f in flips]))
    with pytest.raises(ValueError, match="items.source=sudoku needs data=sudoku"):
        make_cfg(tmp_path, httpserver, items={"source": "sudoku"})
    with pytest.raises(ValueError, match="data.block_size=2: EDCT's Sudoku items and editor are 9x9 boards"):
        make_cfg(tmp_path, httpserver, data={**SUDOKU, "block_size": 2, "corruption": "swaps"}, items={"source": "sudoku"})
    with pytest.raises(ValueError, match="the Sudoku editor edits 9x9 boards"):
        sudoku_items(data_config({**SUDOKU, "block_size": 2, "corruption": "swaps"}), "test", np.arange(2))


def test_usage_adds_up_over_resumed_invocations(tmp_path, httpserver):
    """A run resumed (here: extended from 3 to 6 items) reports this invocation's usage and the
    run's total over every invocation; the ledger is written after each item."""
    table, _ = expected_chain(6, tmp_path / "cache")
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(scripted(table))
    first = run(make_cfg(tmp_path, httpserver, items={"n": 3}))["result"]
    assert first["usage_total"] == first["usage"] and first["usage"]["vlm"]["requests"] > 0
    ledger = json.loads((tmp_path / "run" / "usage_total.json").read_text())
    assert ledger["usage"] == first["usage"]
    second = run(make_cfg(tmp_path, httpserver, items={"n": 6}))["result"]
    u1, u2, tot = first["usage"]["vlm"], second["usage"]["vlm"], second["usage_total"]["vlm"]
    assert tot["requests"] == u1["requests"] + u2["requests"] and u2["requests"] > 0
    assert tot["prompt_tokens"] == u1["prompt_tokens"] + u2["prompt_tokens"] and tot["cost_usd"] == pytest.approx(u1["cost_usd"] + u2["cost_usd"])
    assert "every invocation of this run" in (tmp_path / "run" / "results.md").read_text()
    third = run(make_cfg(tmp_path, httpserver, items={"n": 6}))["result"]  # nothing left: nothing sent, the total kept
    assert third["usage"]["vlm"]["requests"] == 0 and third["usage_total"]["vlm"]["requests"] == tot["requests"]
