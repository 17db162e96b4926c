"""``cbm-icl`` end to end on synthetic robots against a loopback chat endpoint.

The scripted model reads the support turns (image -> true class via a lookup table, label from the
assistant turn) and answers the query by its true class, except on planned episodes where it
answers wrong or writes a planned malformed output; the scripted judge scores by condition. So
every number in the accuracy, parse-error, checker and judge tables is known exactly."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from chat_stub import completion

from cbm.vlm.icl.config import ICLConfig
from cbm.vlm.icl.datasets import make_dataset
from cbm.vlm.icl.judge import METRICS
from cbm.vlm.icl.run import run
from cbm.vlm.messages import decode_image_part

CONF = Path(__file__).resolve().parents[2] / "cbm" / "conf" / "icl.yaml"
ROBOT = {"kind": "robot", "class_by": "hand_subtype", "split": "test",
         "data": {"name": "robot", "image_size": 32, "n_train": 0, "n_calib": 0, "n_test": 90}}  # fmt: skip
#: A phrase of each condition's instruction (in the system prompt) and of its judge description.
MARK = {"E1": "Provide only the final class label", "E2": "concise natural language explanation", "E3": "smallest sufficient set",
        "E4": "knowledge base (KB)", "E5": "minimal and concise Description Logic statements"}  # fmt: skip
JUDGE_MARK = {"E1": "without an explanation", "E2": "concise natural-language explanation", "E3": "minimal list of critical observable",
              "E4": "rule-based explanation", "E5": "(DL)-based explanation"}  # fmt: skip
JUDGE_OPENING = "You are a fair LLM judge"


def prompts() -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONF).prompts)


def image_key(part: dict) -> bytes:
    return np.asarray(decode_image_part(part).convert("RGB")).tobytes()


def camel(label: str) -> str:
    """``"star hands"`` -> ``"StarHands"`` (a class named in DL as a model would write it)."""
    return "".join(w.capitalize() for w in label.split())


def model_reply(condition: str, right: str, wrong: str, n: int, k: int) -> str:
    """The planned output, in the paper's formats (Appendix A.1): E1 wrong on 4-way, E3 wrong on
    4-way 1-shot; E2 leaves <explanation> unclosed on 3-way; E4 (``feature: value`` pairs, an
    IF [feature = value] THEN [class] KB) omits <rule_check> on 2-way 5-shot; E5 (TBox, ABox with
    ``hasVisualFeature(Query, F)``, the fired rules restated) is correct on 2-way, claims a
    necessary condition on 3-way, copies the template's placeholders on 4-way."""
    if condition == "E1":
        return f"<response>{wrong if n == 4 else right}</response>"
    if condition == "E2":
        return "<explanation>the hands" + ("" if n == 3 else "</explanation>") + f"<response>{right}</response>"
    if condition == "E3":
        return f"<features>\n- star hands\n- round head\n</features>\n<response>{wrong if (n, k) == (4, 1) else right}</response>"
    if condition == "E4":
        rule = f"IF [hand shape = star AND head shape = round] THEN [{right}]"
        rc = "" if (n, k) == (2, 5) else f"<rule_check>\n- {rule} fires: hand shape is star and head shape is round.\n</rule_check>\n"
        return (f"<features>\n- hand shape: star\n- head shape: round\n</features>\n<kb>\n- {rule}\n- IF [hand shape = ball] THEN [{wrong}]\n"
                f"</kb>\n{rc}<response>{right}</response>")  # fmt: skip
    if n == 2:
        fired = f"[{right}] ≡ hasVisualFeature([star hands]) ⊓ hasVisualFeature([round head])"
        tbox = f"- {fired}\n- hasVisualFeature(BallHands) ⊑ {camel(wrong)}"
        claim = f"{camel(right)} ≡ hasVisualFeature(RoundHead) ⊓ hasVisualFeature(StarHands)"  # the same axiom, written otherwise
    elif n == 3:
        tbox = claim = f"{camel(right)} ⊑ hasVisualFeature(StarHands)"
    else:
        tbox = claim = "[Class3] ≡ hasVisualFeature([F3]) ⊓ hasVisualFeature([F4])"
    return (f"<tbox>\n{tbox}\n</tbox>\n<abox>\n- hasVisualFeature(Query, [star hands])\n- hasVisualFeature(Query, RoundHead)\n</abox>\n"
            f"<dl_explanation>\n- Rule(s) fired: {claim}\n</dl_explanation>\n<response>{right}</response>")  # fmt: skip


JUDGE_SCORE = {"E1": 3, "E2": 4, "E3": 5, "E4": 5, "E5": 2}


def scripted(table: dict[bytes, str]):
    def handler(req):
        msgs = json.loads(req.data)["messages"]
        parts = msgs[-1]["content"]
        text = next(p["text"] for p in parts if p["type"] == "text")
        if text.startswith(JUDGE_OPENING):
            cond = next(c for c, mark in JUDGE_MARK.items() if mark in text)
            s = {m: JUDGE_SCORE[cond] for m in METRICS}
            if cond == "E2" and "<explanation>the hands</explanation>" not in text:  # the unclosed ones: a broken judge reply
                return completion("".join(f"<{m}>{7 if m == 'conciseness' else v}</{m}>" for m, v in s.items()))
            return completion("".join(f"<{m}>{v}</{m}>" for m, v in s.items()))
        labels = {}
        for i, m in enumerate(msgs[:-1]):
            if m["role"] == "user":
                img = next(p for p in m["content"] if p["type"] == "image_url")
                labels[table[image_key(img)]] = re.search(r"<response>(.*?)</response>", msgs[i + 1]["content"]).group(1)
        right = labels[table[image_key(next(p for p in parts if p["type"] == "image_url"))]]
        wrong = next(v for v in labels.values() if v != right)
        n, k = len(labels), sum(m["role"] == "assistant" for m in msgs) // len(labels)
        system = msgs[0]["content"] if msgs[0]["role"] == "system" else ""
        cond = next(c for c, mark in MARK.items() if mark in system + text)
        return completion(model_reply(cond, right, wrong, n, k))

    return handler


def make_cfg(tmp_path: Path, server, **over) -> ICLConfig:
    client = {"backend": "openai", "model": "scripted", "base_url": server.url_for("/v1"), "cache_dir": str(tmp_path / "replies"),
              "max_retries": 0, "backoff_s": 0.0, "concurrency": 4}  # fmt: skip
    settings = dict(output_dir=str(tmp_path / "run"), models={"vlm": client}, judge={**client, "model": "judge"}, datasets={"robot": ROBOT},
                    prompts=prompts(), cache_dir=str(tmp_path / "cache"), progress=False)  # fmt: skip
    settings.update(over)
    return ICLConfig(**settings)


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> dict[bytes, str]:
    ds = make_dataset("robot", dict(ROBOT), str(tmp_path_factory.mktemp("cache")))
    out = {np.asarray(ds.image(i)).tobytes(): ds.class_names[ds.labels[i]] for i in range(len(ds))}
    assert len(out) == len(ds)  # every image distinct: the lookup is exact
    return out


def test_end_to_end_tables_are_exactly_the_planned_ones(tmp_path, httpserver, table):
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(scripted(table))
    out = run(make_cfg(tmp_path, httpserver))
    recs, t = out["records"], out["tables"]
    assert len(recs) == 5 * 26 and out["result"]["episodes"] == {"robot": 26}
    eps = json.loads((tmp_path / "run" / "episodes" / "robot.json").read_text())["episodes"]
    assert len(eps) == 26 and sorted({(e["n_way"], e["k_shot"]) for e in eps}) == [(n, k) for n in (2, 3, 4) for k in (1, 5)]
    acc = {r["condition"]: r for r in t["accuracy"]}
    assert {c: (r["answered"], r["accuracy"]) for c, r in acc.items()} == {
        "E1": (26, 20 / 26), "E2": (26, 1.0), "E3": (26, 23 / 26), "E4": (26, 1.0), "E5": (26, 1.0)}
    assert acc["E1"]["se"] == pytest.approx(np.sqrt(20 / 26 * 6 / 26 / 26))
    errs = {r["condition"]: {k: v for k, v in r.items() if k not in ("model", "condition", "replies", "reasked", "recovered") and v} for r in t["parse_errors"]}
    assert errs == {"E1": {}, "E2": {"unclosed": 8}, "E3": {}, "E4": {"missing": 6}, "E5": {}}
    (ch,) = t["checker"]
    assert ch["outputs"] == 26 and ch["valid"] == pytest.approx(20 / 26) and ch["placeholders"] == pytest.approx(6 / 26)
    assert ch["claimed_necessary"] == pytest.approx(8 / 26) and ch["entails_response"] == pytest.approx(12 / 26)
    # the 6 copied templates hold no axiom the checker can read: never matched or consistent
    assert ch["fired_match"] == pytest.approx(12 / 26) and ch["consistent"] == pytest.approx(20 / 26)
    judge = {r["condition"]: r for r in t["judge"]}
    assert judge["E1"]["judged"] == 0 and not any("judge" in r for r in recs if r["condition"] == "E1")  # E1: no explanation to judge
    assert all(judge[c][m] == JUDGE_SCORE[c] for c in judge if c != "E1" for m in METRICS)  # the broken scores are not counted
    e2 = [r for r in recs if r["condition"] == "E2"]
    assert sum(not r["judge"]["complete"] for r in e2) == 8 and all(r["judge"]["errors"] == {"conciseness": "outside 1-5: '7'"}
                                                                    for r in e2 if not r["judge"]["complete"])  # fmt: skip
    st = out["stats"]["vlm/robot"]
    assert st["episodes_paired"] == 26
    # Holm over the 10 pairs: the three smallest p (E1 vs E2, E4, E5: 0 vs 6 discordant) become 10p, max(9p, 10p), ...
    assert st["mcnemar"]["E1 vs E2"] == {"a_only": 0, "b_only": 6, "p": pytest.approx(2 * 0.5**6), "p_adjusted": pytest.approx(10 * 2 * 0.5**6)}
    assert st["mcnemar"]["E2 vs E4"] == {"a_only": 0, "b_only": 0, "p": 1.0, "p_adjusted": 1.0}
    assert all(v["p_adjusted"] >= v["p"] for v in st["mcnemar"].values())
    assert st["judge_episodes"] == 26 - 8 and st["judged_conditions"] == ["E2", "E3", "E4", "E5"]
    md = (tmp_path / "run" / "stats.md").read_text()
    assert "McNemar (exact) E1 vs E2, n = 26: 0 vs 6 discordant, p = 0.03125, holm-adjusted over the 10 pairs p = 0.3125" in md
    assert "judge tests on the 18 episodes judged completely" in md and "n = 18" in md
    assert st["cochrans_q"]["df"] == 4 and st["cochrans_q"]["p"] < 0.05
    # the paper's tables: one model and one dataset, so Tables 4 and 5 are the accuracy per condition
    assert [(r["condition"], r["model"], r["n"], r["accuracy"]) for r in t["accuracy_by_model"]] == [
        (c, "vlm", 26, acc[c]["accuracy"]) for c in ("E1", "E2", "E3", "E4", "E5")]
    assert [r["accuracy"] for r in t["accuracy_by_dataset"]] == [r["accuracy"] for r in t["accuracy_by_model"]]
    nk = {(r["condition"], r["n_way"], r["k_shot"]): (r["n"], r["accuracy"]) for r in t["accuracy_by_nk"]}
    assert nk[("E1", 4, 1)] == (3, 0.0) and nk[("E1", 2, 5)] == (6, 1.0) and nk[("E3", 4, 1)] == (3, 0.0) and nk[("E3", 4, 5)] == (3, 1.0)
    tg = {(r["condition"], r["metric"]): (r["n"], r["mean"]) for r in t["judge_by_condition"] if r["metric"] in ("textual_groundedness", "conciseness")}
    assert tg == {("E2", "textual_groundedness"): (26, 4.0), ("E2", "conciseness"): (18, 4.0),  # 8 replies without a valid conciseness
                  **{(c, m): (26, JUDGE_SCORE[c]) for c in ("E3", "E4", "E5") for m in ("textual_groundedness", "conciseness")}}  # fmt: skip
    sp = out["stats"]["spearman_by_condition"]  # every score constant within a condition: no test runs, 36 were planned
    assert (sp["planned"], sp["family"], len(sp["rows"])) == (36, 0, 36) and all(r["n"] == (18 if r["condition"] == "E2" else 26) for r in sp["rows"])
    assert "| E1 | 76.9 (8.3), n = 26 |" in md and "| robot / E1 | 100.0 (6) | 100.0 (6) | 100.0 (4) | 100.0 (4) | 0.0 (3) | 0.0 (3) |" in md
    assert "p adjusted (holm) over the family of 0 tests (36 planned" in md
    run_dir = tmp_path / "run"
    for f in ("accuracy_by_model.csv", "accuracy_by_dataset.md", "accuracy_by_nk.csv", "judge_by_condition.md"):
        assert (run_dir / f).stat().st_size > 0, f
    for f in ("accuracy.md", "accuracy.csv", "parse_errors.csv", "judge.md", "judge.csv", "checker.md", "checker.csv", "stats.md",
              "stats.json", "results.json"):  # fmt: skip
        assert (run_dir / f).stat().st_size > 0, f
    assert (run_dir / "radar.png").read_bytes()[:4] == b"\x89PNG"
    assert "| vlm | robot | E1 | 26 | 26 | 0.769 |" in (run_dir / "accuracy.md").read_text()
    # a rerun resumes from the records: not one request
    sent = len(httpserver.log)
    for p in list((run_dir / "records").rglob("*.json"))[:10]:
        p.unlink()  # lost records come back from the reply cache
    again = run(make_cfg(tmp_path, httpserver))
    assert len(httpserver.log) == sent and again["tables"] == t


def test_judge_options_and_human_agreement(tmp_path, httpserver, table):
    """Global discriminativeness and reproducibility reruns; judge vs human scores from a CSV."""
    base = scripted(table)

    def handler(req):
        text = json.loads(req.data)["messages"][-1]["content"][-1]["text"]
        if "global discriminativeness" in text:
            return completion("<global_discriminativeness>3</global_discriminativeness>")
        return base(req)

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(handler)
    first = run(make_cfg(tmp_path, httpserver, conditions=["E1", "E3"], episodes={"k_shots": [1]}))
    trials = [r["trial"] for r in first["records"] if r["condition"] == "E3"][:5]
    csv_path = tmp_path / "human.csv"
    csv_path.write_text("trial,conciseness,specificity\n" + "".join(f"{t},{5 if i % 2 else 4},5\n" for i, t in enumerate(trials)))
    out = run(make_cfg(tmp_path, httpserver, conditions=["E1", "E3"], episodes={"k_shots": [1]}, output_dir=str(tmp_path / "run2"),
                       judge_options={"global_discriminativeness": True, "reproducibility_repeats": 2},
                       statistics={"human_scores": str(csv_path), "correction": "bonferroni"}))  # fmt: skip
    j = {r["condition"]: r for r in out["tables"]["judge"]}
    assert j["E3"]["global_discriminativeness"] == 3.0 and j["E3"]["reproducibility"] == 1.0  # same features every rerun
    assert "reproducibility" not in j["E1"]
    human = {r["metric"]: r for r in out["stats"]["judge_vs_human"]}
    assert human["conciseness"]["n"] == 5 and human["conciseness"]["twa"] == pytest.approx((2 * 1 + 3 * 0.75) / 5)  # judge gave 5
    assert human["specificity"]["twa"] == 1.0 and human["specificity"]["mae"] == 0.0
    assert out["stats"]["vlm/robot"]["spearman_vs_correct"][0]["correction"] == "bonferroni"
    bad = tmp_path / "bad.csv"
    bad.write_text(f"trial,conciseness\n{trials[0]},five\n")
    with pytest.raises(ValueError, match="line 2: conciseness='five' is not a number"):
        run(make_cfg(tmp_path, httpserver, conditions=["E1", "E3"], episodes={"k_shots": [1]}, output_dir=str(tmp_path / "run2"),
                     statistics={"human_scores": str(bad)}))  # fmt: skip


def test_tiny_local_vlm_in_context(tmp_path):
    """The local backend takes the whole multi-turn conversation (support images as user turns,
    labels as assistant turns); a random tiny VLM's replies are recorded with their parse errors
    and the judge's missing scores, and the tables are still written."""
    from cbm.vlm.tiny import build_tiny_vlm

    model = str(build_tiny_vlm(tmp_path / "tiny"))
    local = {"backend": "local", "model": model, "cache_dir": str(tmp_path / "replies"), "max_tokens": 12}
    cfg = ICLConfig(output_dir=str(tmp_path / "run"), models={"tiny": local}, judge=local, datasets={"robot": ROBOT}, prompts=prompts(),
                    cache_dir=str(tmp_path / "cache"), progress=False, conditions=["E1", "E3"],
                    episodes={"n_ways": [2], "k_shots": [1], "reps_times_n": 6})  # fmt: skip
    out = run(cfg)
    assert [r["status"] for r in out["records"]] == ["answered"] * 6
    errs = {r["condition"]: r for r in out["tables"]["parse_errors"]}
    n_issues = {c: sum(len(r["parsed"]["issues"]) for r in out["records"] if r["condition"] == c) for c in ("E1", "E3")}
    assert {c: sum(v for k, v in errs[c].items() if k not in ("model", "condition", "replies", "reasked", "recovered")) for c in errs} == n_issues
    assert all(r["judge"]["complete"] or r["judge"]["errors"] for r in out["records"] if r["condition"] != "E1")
    assert not any("judge" in r for r in out["records"] if r["condition"] == "E1")
    reasked = sum("reask" in r for r in out["records"])  # a random model's answers without a label are re-asked once
    assert reasked == sum(r["reasked"] for r in errs.values()) and reasked == sum(r.get("first_issues") is not None for r in out["records"])
    assert out["result"]["usage"]["tiny"]["requests"] == 6 + reasked and (tmp_path / "run" / "radar.png").is_file()


def test_sudoku_classes_are_exact():
    from cbm.vlm.icl.datasets import SUDOKU_CLASSES, sudoku_boards
    from synthetic.sudoku.checker import check_board

    boards, labels = sudoku_boards(25, seed=3)
    assert np.bincount(labels, minlength=4).min() >= 20  # a few row swaps that keep the boxes valid are dropped
    c = check_board(boards)
    fails = {i: {tuple(np.flatnonzero(~row) // 9) for row in c[labels == i]} for i in range(4)}
    assert fails[0] == {()} and fails[1] == {(1, 1)} and fails[2] == {(0, 0)}  # valid; two columns; two rows
    assert all(set(f) == {2} for f in fails[3])  # boxes only
    assert SUDOKU_CLASSES[1] == "two columns broken"
    ds = make_dataset("sudoku", {"kind": "sudoku", "per_class": 8, "cell_size": 14})
    assert ds.image(0).shape == (9 * 14 + 2, 9 * 14 + 2, 3) or ds.image(0).ndim == 3


def test_image_folder_and_offline_torchvision(tmp_path):
    from PIL import Image

    for c in ("cats", "dogs"):
        (tmp_path / "folder" / c).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (8, 8), (i * 40, 0, 0)).save(tmp_path / "folder" / c / f"{i}.png")
    ds = make_dataset("f", {"kind": "imagefolder", "root": str(tmp_path / "folder")})
    assert ds.class_names == ["cats", "dogs"] and list(ds.labels) == [0, 0, 0, 1, 1, 1] and ds.image(4).size == (8, 8)
    with pytest.raises(ValueError, match="is not a directory"):
        make_dataset("f", {"kind": "imagefolder", "root": str(tmp_path / "nope")})
    # a torchvision dataset present on disk (MNIST's idx files, written here), read with download=False
    raw = tmp_path / "mnist" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    labels = np.repeat(np.arange(4, dtype=np.uint8), 5)
    pixels = (np.arange(len(labels))[:, None, None] * 10 + np.zeros((1, 28, 28))).astype(np.uint8)
    for split in ("train", "t10k"):
        (raw / f"{split}-images-idx3-ubyte").write_bytes(np.array([2051, len(labels), 28, 28], ">i4").tobytes() + pixels.tobytes())
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(np.array([2049, len(labels)], ">i4").tobytes() + labels.tobytes())
    mnist = make_dataset("m", {"kind": "torchvision", "name": "MNIST", "root": str(tmp_path / "mnist"), "train": False})
    assert list(mnist.labels) == list(labels) and mnist.class_names[0].startswith("0") and np.asarray(mnist.image(7)).max() == 70
    folder = make_dataset("tf", {"kind": "torchvision", "name": "ImageFolder", "root": str(tmp_path / "folder")})  # no download argument
    assert folder.class_names == ["cats", "dogs"]
    with pytest.raises(ValueError, match="CIFAR10 at .* is not usable offline"):
        make_dataset("c", {"kind": "torchvision", "name": "CIFAR10", "root": str(tmp_path / "nothing"), "train": False})
    with pytest.raises(ValueError, match="unknown kind 'web'"):
        make_dataset("w", {"kind": "web"})


@pytest.mark.parametrize(
    "over, match",
    [
        ({"conditions": ["E6"]}, r"conditions: unknown \['E6'\]"),
        ({"episodes": {"n_ways": [5]}}, "not a multiple of N"),
        ({"judge_options": {"reproducibility_repeats": 1}}, "0 \\(off\\) or >= 2"),
        ({"statistics": {"correction": "fdr"}}, "statistics.correction"),
        ({"models": {}}, "at least one model"),
        ({"datasets": {"x": {"root": "/"}}}, "datasets.x: needs a kind"),
    ],
)
def test_bad_config_is_one_line(tmp_path, httpserver, over, match):
    with pytest.raises(ValueError, match=match) as err:
        make_cfg(tmp_path, httpserver, **over)
    assert "\n" not in str(err.value)


def test_bad_prompt_template_is_one_line(tmp_path, httpserver):
    p = prompts()
    p["instructions"]["E2"] = "Explain {reason}"
    with pytest.raises(ValueError, match=r"prompts.instructions.E2: unknown placeholder\(s\) \['reason'\]"):
        make_cfg(tmp_path, httpserver, prompts=p)
    del p["instructions"]["E3"]
    with pytest.raises(ValueError, match=r"prompts.instructions: no entry for \['E3'\]"):
        make_cfg(tmp_path, httpserver, prompts=p)


def test_cli_runs_and_rejects_bad_input_in_one_line(tmp_path, httpserver, table):
    import os
    import subprocess
    import sys

    base = scripted(table)

    def handler(req):  # the global-discriminativeness judge says 3
        text = json.loads(req.data)["messages"][-1]["content"][-1]["text"]
        return completion("<global_discriminativeness>3</global_discriminativeness>") if "global discriminativeness" in text else base(req)

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(handler)
    exe = [sys.executable, "-m", "cbm.vlm.apps.icl"]
    roles = [f"{r}.{k}={v}" for r in ("models.vlm", "judge") for k, v in
             (("model", "scripted"), ("base_url", httpserver.url_for("/v1")), ("cache_dir", tmp_path / "replies"))]  # fmt: skip
    data = [f"datasets.robot.data.{k}={v}" for k, v in ROBOT["data"].items() if k != "name"]
    env = {**os.environ, "CBM_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "cli"
    # with the global judge: E1 is not judged, so its row's global cell is empty (W&B's table refused it: exit 1 after every file)
    done = subprocess.run([*exe, *roles, *data, "conditions=[E1,E5]", "episodes.k_shots=[1]", "judge_options.global_discriminativeness=true",
                           f"hydra.run.dir={out}"], capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "E5 checker:" in done.stdout + done.stderr and (out / "radar.png").is_file()
    assert "Re-asks and losses by reason" in done.stdout + done.stderr and (out / "losses.csv").is_file()  # the summary has the table
    assert json.loads((out / "results.json").read_text())["trials"] == 2 * 13
    from cbm.tracking.offline import runs_under  # the command line logs to W&B offline (job type icl)

    (wb,) = runs_under(out)
    assert wb.job_type == "icl" and wb.exit_code == 0 and wb.config["run"]["command"] == "cbm-icl"
    assert wb.config["conditions"] == ["E1", "E5"] and any(k.startswith("tables/") for h in wb.history for k in h)
    (judge,) = [json.loads(p.read_text()) for p in out.rglob("files/media/table/tables/judge_*.table.json") if re.match(r"judge_\d+_", p.name)]
    cols, rows = judge["columns"], judge["data"]
    g = cols.index("global_discriminativeness")
    assert [(r[cols.index("condition")], r[g]) for r in rows] == [("E1", None), ("E5", 3.0)]
    bad = subprocess.run([*exe, *roles, "episodes.k_shots=[0]"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip() == "cbm-icl: error: episodes.k_shots: distinct K, each >= 1, got [0]"
