"""EDCT against a loopback endpoint that answers the way real models do: prose around the tags,
markdown without tags, code fences, quotes, sentences inside a tag, ``<think>`` blocks holding
another answer, unclosed and misnamed tags, scores written "4/5" / "4.0" / "Score: 4", refusals
that a re-ask with a format reminder recovers, and a 503 before a reply. Each reply's form is drawn
from a seeded hash of the request, so the run is the same on every machine. The VLM is asked as
the paper does: the answer in turn 1, the explanation in turn 2 of the same conversation.

Acceptance: at least 95% of the items scored, every loss counted by stage and reason, and the
scores equal the planned ones (the VLM answers by the label rule, the judge calls AC "yes" exactly
when the answer changed), computed over the items that were scored."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest
from chat_stub import completion, explain_turn, first_image, texts
from test_edct import CHAIN, chain_truth, prompts
from werkzeug import Response

from cbm.vlm.edct.config import EDCTConfig
from cbm.vlm.edct.run import run
from cbm.vlm.icl.judge import METRICS
from cbm.vlm.messages import decode_image_part

N_ITEMS = 40
DATA = {"name": "robot", "n_train": 20, "n_calib": 0, "n_test": N_ITEMS, "image_size": 32}


def explanation_of(pixels: bytes) -> str:
    """The VLM's explanation; it names the image, so every item's later prompts differ."""
    return f"Its feet and its mouth decide it (image {hashlib.sha256(pixels).hexdigest()[:8]})."


def answer_forms(label: str, pixels: bytes = b"") -> list[str]:
    """Turn 1's reply (the answer only was asked) as different models write it (all but the refusal
    readable); some explain anyway, unasked."""
    other = "Drent" if label == "Glorp" else "Glorp"
    return [
        f"<answer>{label}</answer>",
        f"Sure! Here is my analysis.\n\n<answer>{label}</answer>\n\nLet me know if you need more.",
        f"**Answer:** {label}",
        f"```xml\n<answer>{label}</answer>\n```",
        f'<answer>"{label}"</answer>',
        f"<answer>The robot is a {label}.</answer>",
        f"<think>At first sight it could be the other class. <answer>{other}</answer></think>\n<answer>{label}</answer>",
        f"<answer>{label}",
        f"<final_answer>{label}</final_answer>",
        f"<answer>{label.lower()}.</answer> <explanation>{explanation_of(pixels)}</explanation>",
        f"<ANSWER>**{label}**</ANSWER>",
        "I can't determine that from such a small image.",  # a refusal: the re-ask recovers it
        f"It is a {label}, not a {other}.",
    ]


def explanation_forms(pixels: bytes) -> list[str]:
    """Turn 2's reply (the explanation, asked after the answer) as different models write it (all
    but the last readable)."""
    text = explanation_of(pixels)
    return [
        f"<explanation>{text}</explanation>",
        f"Of course.\n\n<explanation>{text}</explanation>",
        f"**Explanation:** {text}",
        f"```xml\n<explanation>{text}</explanation>\n```",
        text,  # plain prose
        f"<explanation>{text}",
        f"<think>Let me look again.</think>\n<Explanation>{text}</Explanation>",
        "Hmm.",  # too short to be an explanation: the re-ask recovers it
    ]


def verdict_forms(ac: str, score: int) -> list[str]:
    return [
        f"<ac>{ac}</ac><ef>yes</ef><score>{score}</score>",
        f"**AC:** {ac}\n**EF:** yes\n**Score:** {score}/5",
        f"<ac>{ac.capitalize()}</ac>\n<ef>Yes</ef>\n<score>{score}.0</score>",
        f"<think>Let me weigh this. <ac>{'no' if ac == 'yes' else 'yes'}</ac></think><ac>{ac}</ac><ef>yes</ef><score>{score}</score>",
        f"Answer consistency: {ac}\nExplanation faithfulness: yes\nScore: {score}",
        f"<ac>{'true' if ac == 'yes' else 'false'}</ac><ef>true</ef><score>{score} out of 5</score>",
        f"```\n<ac>{ac}</ac>\n<ef>yes</ef>\n<score>**{score}**</score>\n```",
        "<ac>It depends on what the explanation meant.</ac>",  # unreadable: the re-ask recovers it
    ]


CONCEPT_FORMS = [
    "<concept>feet</concept>\n<concept>the mouth</concept>",
    "The explanation cites:\n1. **feet**\n2. the mouth",
    "<think>Which concepts? Maybe <concept>eyes</concept>.</think>\n<concept>feet</concept><concept>the mouth</concept>",
    "```\n<concept>feet</concept>\n<concept>the mouth</concept>\n```",
]


def chain_forms() -> list[str]:
    edits = "".join(f'<edit index="{i}"><concept>{c}</concept><keep>everything else</keep><change>the {c}</change>'
                    f"<how>redraw it</how><constraints>nothing else</constraints></edit>" for i, c in enumerate(CHAIN, 1))  # fmt: skip
    inner = [f"<concept>{c}</concept>\n<keep>everything else</keep>\n<change>the {c}</change>\n<how>redraw it</how>\n"
             f"<constraints>nothing else</constraints>" for c in CHAIN]  # fmt: skip
    headed = "I will make two edits.\n\n" + "\n\n".join(f"### Edit {i}\n{body}" for i, body in enumerate(inner, 1))
    bold = "\n".join(f"**Edit {i}:**\n{body}" for i, body in enumerate(inner, 1))
    numbered = "".join(f"<edit_{i}>{body}</edit_{i}>" for i, body in enumerate(inner, 1))
    return [edits, f"Here is the chain:\n```xml\n{edits}\n```", f"<think>Plan the order first.</think>\n{edits}", headed, bold, numbered]


def realistic(table: dict[bytes, str], never: bytes, failed_once: set[bytes], used: set[tuple[str, int]]):
    """The handler: every role answered correctly in a drawn form (the VLM's answer in turn 1, its
    explanation in turn 2 of the same conversation); a re-ask answered in the plain form; ``never`` (one item's image) refused
    every time; the first request of every 7th kind answered 503 (then retried). ``used`` collects
    the (role, form) pairs sent."""

    def pick(role: str, forms: list[str], key: bytes, reask: bool) -> str:
        i = 0 if reask else int.from_bytes(hashlib.sha256(b"seed-0" + key).digest()[:4], "big") % len(forms)
        used.add((role, i))
        return forms[i]

    def handler(req):
        msgs = json.loads(req.data)["messages"]
        key = hashlib.sha256(req.data).digest()
        if key[0] % 7 == 0 and key not in failed_once:
            failed_once.add(key)
            return Response("upstream busy", status=503)
        reask = len(msgs) >= 3 and msgs[-2]["role"] == "assistant" and "could not be read" in texts(msgs[-1])
        if explain_turn(msgs):  # turn 2: the explanation of the answer given in turn 1
            pixels = np.asarray(decode_image_part(first_image(msgs)).convert("RGB")).tobytes()
            return completion(pick("explanation", explanation_forms(pixels), pixels + b"explain", reask))
        user = msgs[-3 if reask else -1]["content"]
        text = next(p["text"] for p in user if p["type"] == "text")
        image = next((p for p in user if p["type"] == "image_url"), None)
        if image is not None:
            pixels = np.asarray(decode_image_part(image).convert("RGB")).tobytes()
            if pixels == never:
                return completion("I'm sorry, but I can't help with identifying this robot.")
            return completion(pick("answer", answer_forms(table[pixels], pixels), pixels, reask))
        if "List up to" in text:
            return completion(pick("concepts", CONCEPT_FORMS, text.encode(), reask))
        if "chronological chain" in text:
            return completion(pick("chain", chain_forms(), text.encode(), reask))
        if "Answer Consistency (AC)" in text:
            before = re.search(r"Original answer: (\w+)", text).group(1)
            after = re.search(r"Answer after the edit: (\w+)", text).group(1)
            ac = "yes" if before != after else "no"
            return completion(pick("verdict", verdict_forms(ac, 5 if ac == "yes" else 2), text.encode(), reask))
        return Response("unexpected prompt", status=400)

    return handler


@pytest.mark.timeout(600)
def test_edct_scores_realistic_replies(tmp_path, httpserver):
    from cbm.vlm.editors import RobotEditor, robot_items
    from synthetic.registry import data_config
    from synthetic.robot import CLASS_NAMES, glorp_probability
    from synthetic.robot.attributes import attribute_table

    cfg = data_config(DATA)

    def label(row: np.ndarray) -> str:
        return CLASS_NAMES[int(glorp_probability(attribute_table(np.asarray(row)[None]), cfg)[0] > 0.5)]

    items = robot_items(cfg, "test", np.arange(N_ITEMS), cache_dir=str(tmp_path / "cache"))
    table, flips = chain_truth(items, RobotEditor(cfg), CHAIN, label, "row")
    never = items[3].array.tobytes()
    used: set[tuple[str, int]] = set()
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(realistic(table, never, set(), used))
    client = {"backend": "openai", "model": "realistic", "base_url": httpserver.url_for("/v1"), "cache_dir": str(tmp_path / "replies"),
              "max_retries": 2, "backoff_s": 0.0}  # fmt: skip
    out = run(EDCTConfig(output_dir=str(tmp_path / "run"), vlm=client, llm=client, judge=client, prompts=prompts(), data=DATA,
                         cache_dir=str(tmp_path / "cache"), items={"n": N_ITEMS}, workers=4, progress=False))  # fmt: skip
    s, recs, res = out["summary"], out["records"], out["result"]
    statuses = [r["status"] for r in recs]
    assert statuses == ["done"] * 3 + ["baseline_unparsed"] + ["done"] * (N_ITEMS - 4)
    assert s["items_scored"] == N_ITEMS - 1 >= 0.95 * N_ITEMS
    # the loss is counted by stage and reason, and the refusal was re-asked once without success
    assert recs[3]["baseline"]["errors"] == ["refused: the reply declines to answer"] and "reask" in recs[3]["baseline"]
    assert res["parse_errors"] == {"baseline/refused": 1}
    reasks = res["reasks"]
    assert reasks["baseline"]["recovered"] == reasks["baseline"]["reasked"] - 1  # all but the item that always refuses
    assert all(v["recovered"] == v["reasked"] for k, v in reasks.items() if k != "baseline")
    assert sum(v["reasked"] for v in reasks.values()) >= 5  # refusals and unreadable verdicts did occur
    assert reasks.get("chain", {"reasked": 0})["reasked"] == 0  # '### Edit 1' sections and <edit_1> blocks are read as they come
    # every answer read is the right one (the <think> block's other answer never counts), every step judged
    kept = [r for i, r in enumerate(recs) if i != 3]
    assert all(r["baseline"]["answer"] == table[items[i].array.tobytes()] for i, r in enumerate(recs) if i != 3)
    assert all(st["status"] == "judged" and st["answer_changed"] == st["known_change"] for r in kept for st in r["steps"])
    assert all(r["concepts"]["concepts"] == ["feet", "the mouth"] for r in kept)
    planned = [float(np.mean(f)) for i, f in enumerate(flips) if i != 3]
    assert s["ccs"].value == pytest.approx(np.mean(planned)) and s["ccs"].n == N_ITEMS - 1
    graded = [np.mean([1.0 if x else 0.25 for x in f]) for i, f in enumerate(flips) if i != 3]
    assert s["ccs_graded"].value == pytest.approx(np.mean(graded))
    assert s["answer_follows_truth"].value == 1.0 and s["steps_judged"] == 2 * (N_ITEMS - 1)
    # the exact judge reads every re-queried answer these replies carried: this VLM follows the rule (AC 1 on every step)
    assert s["ac_exact"].value == 1.0 and s["ac_exact"].n == 2 * (N_ITEMS - 1)
    md = (tmp_path / "run" / "results.md").read_text()
    assert "parse errors (replies kept): baseline/refused 1" in md and "re-asked (recovered): baseline" in md
    # every form of every role was sent (the corpus is exercised, not one lucky form), and 503s were retried
    sizes = {"answer": len(answer_forms("Glorp")), "explanation": len(explanation_forms(b"")), "verdict": len(verdict_forms("yes", 5)), "concepts": len(CONCEPT_FORMS), "chain": len(chain_forms())}
    assert used == {(role, i) for role, n in sizes.items() for i in range(n)}
    assert sum(resp.status_code == 503 for _, resp in httpserver.log) >= 10


# ----------------------------------------------------------------------------- the ICL study
def icl_answer_forms(reply: str) -> list[str]:
    """A planned ICL reply as different models write it (all but the refusal readable)."""
    label = re.search(r"<response>(.*?)</response>", reply).group(1)
    other = "Class_X"
    return [
        reply,
        f"Sure! Let me compare the query with the examples.\n{reply}\nHope that helps.",
        f"```xml\n{reply}\n```",
        f"<think>It resembles the first example. <response>{other}</response></think>\n{reply}",
        reply.replace(f"<response>{label}</response>", f"<response>**{label}**</response>"),
        reply.replace(f"<response>{label}</response>", f"<response>The query image shows {label}.</response>"),
        reply.replace("<response>", "<Response>").replace("</response>", "</Response>"),
        reply.replace(f"<response>{label}</response>", f"<response>{label}"),  # the final tag never closed: read, no re-ask
        reply.replace(f"<response>{label}</response>", f"\n**Response:** {label}"),  # a markdown line for the tag: read, no re-ask
        "I'm unable to classify this image without more context.",  # refusals: the re-ask recovers them
        *REFUSALS[1:3],
    ]


#: Refusals as models write them: no label and no format error, a reason of their own (``refused``).
REFUSALS = [
    "I'm unable to classify this image without more context.",
    "I'm sorry, but I can't classify the query robot from these few examples.",
    "<response>I cannot determine the class from this image.</response>",
    "Unfortunately, it is not possible to tell which class the query belongs to: the image is too small.",
]


def icl_judge_forms(reply: str) -> list[str]:
    pairs = re.findall(r"<(\w+)>(\d+)</\1>", reply)
    return [
        reply,
        "".join(f"<{m}>{v}/5</{m}>" for m, v in pairs),
        "".join(f"<{m}>{v}.0</{m}>" for m, v in pairs),
        "<think>" + "".join(f"<{m}>1</{m}>" for m, _ in pairs) + "</think>\n" + reply,
        "\n".join(f"{m.replace('_', ' ').capitalize()}: {v}" for m, v in pairs),
        "".join(f"<{m}>**{v}**</{m}>" for m, v in pairs),
        "".join(f"<{m}>high</{m}>" for m, _ in pairs),  # unreadable: the re-ask recovers it
    ]


def realistic_icl(inner, used: set[tuple[str, int]]):
    """Wraps the planned (scripted) endpoint: each planned reply sent in a drawn realistic form; a
    re-ask answered with the planned reply as it is."""

    class Req:
        def __init__(self, data: bytes):
            self.data = data

    def handler(req):
        msgs = json.loads(req.data)["messages"]
        reask = len(msgs) >= 3 and msgs[-2]["role"] == "assistant" and "could not be read" in str(msgs[-1]["content"])
        planned = inner(Req(json.dumps({"messages": msgs[:-2] if reask else msgs}).encode()))
        if planned.status_code != 200 or reask:
            return planned
        text = json.loads(planned.get_data())["choices"][0]["message"]["content"]
        role, forms = ("judge", icl_judge_forms(text)) if text.lstrip().startswith("<textual") else ("answer", icl_answer_forms(text))
        i = int.from_bytes(hashlib.sha256(b"seed-0" + req.data).digest()[:4], "big") % len(forms)
        used.add((role, i))
        return completion(forms[i])

    return handler


@pytest.mark.timeout(600)
def test_icl_scores_realistic_replies(tmp_path, httpserver):
    from test_icl_run import ROBOT, make_cfg, scripted

    from cbm.vlm.icl.datasets import make_dataset
    from cbm.vlm.icl.run import run as run_icl

    ds = make_dataset("robot", dict(ROBOT), str(tmp_path / "cache"))
    table = {np.asarray(ds.image(i)).tobytes(): ds.class_names[ds.labels[i]] for i in range(len(ds))}
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(scripted(table))
    plain = run_icl(make_cfg(tmp_path / "plain", httpserver))
    httpserver.clear()
    used: set[tuple[str, int]] = set()
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(realistic_icl(scripted(table), used))
    real = run_icl(make_cfg(tmp_path / "real", httpserver))
    recs = real["records"]
    # every form was sent; every trial answered with a readable label, every judge reply complete where the plan's is
    assert used == {("answer", i) for i in range(len(icl_answer_forms("<response>x</response>")))} | {("judge", i) for i in range(7)}
    assert sum(r["parsed"]["response"] is not None for r in recs) == len(recs) >= 0.95 * len(recs)
    assert [r.get("judge", {}).get("complete") for r in recs] == [r.get("judge", {}).get("complete") for r in plain["records"]]
    assert all(("judge" in r) == (r["condition"] != "E1") for r in recs)  # E1 asks for no explanation: not judged
    # the tables equal the planned run's: accuracy, judge means, parse issues (besides the re-ask counts)
    assert real["tables"]["accuracy"] == plain["tables"]["accuracy"] and real["tables"]["judge"] == plain["tables"]["judge"]
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("reasked", "recovered")} for r in rows]  # noqa: E731
    assert strip(real["tables"]["parse_errors"]) == strip(plain["tables"]["parse_errors"])
    rows = real["tables"]["parse_errors"]
    assert sum(r["reasked"] for r in rows) >= 5 and all(r["recovered"] == r["reasked"] for r in rows)
    assert sum("first_errors" in r.get("judge", {}) for r in recs) >= 5
    # a re-ask only for a reply without a label (the refusals): never for an unclosed final tag or a **Response:** line
    forms = icl_answer_forms("<response>x</response>")
    firsts = [r["reply"] for r in recs if "reask" in r]
    assert firsts and all(f in forms[-3:] for f in firsts)
    assert [i["kind"] for r in recs if "reask" in r for i in r["first_issues"] if i["tag"] == "response"] == ["refused"] * len(firsts)
    lost = {r["condition"]: r for r in real["tables"]["losses"]}
    assert all(r["lost"] == 0 and r["recovered"] == r["reasked"] for r in lost.values())
    assert sum(r["reasked"] for r in lost.values()) == len(firsts)


def refusing_icl(inner, refused: dict[str, int]):
    """Wraps the planned endpoint: the answer to every 5th trial (a seeded hash of its request) is a
    refusal, and so is the re-ask's; ``refused`` counts them by condition. The judge gives 1 on
    every metric to an output that refuses: were a refusal judged, the means would show it."""
    from test_icl_run import MARK

    class Req:
        def __init__(self, data: bytes):
            self.data = data

    def handler(req):
        msgs = json.loads(req.data)["messages"]
        reask = len(msgs) >= 3 and msgs[-2]["role"] == "assistant" and "could not be read" in str(msgs[-1]["content"])
        first = msgs[:-2] if reask else msgs
        last = next(p["text"] for p in first[-1]["content"] if p["type"] == "text")
        if any(r in last for r in REFUSALS):  # the judge, asked about a refusal
            return completion("".join(f"<{m}>1</{m}>" for m in METRICS))
        planned = inner(Req(json.dumps({"messages": first}).encode()))
        system = first[0]["content"] if first[0]["role"] == "system" else ""
        cond = next((c for c, mark in MARK.items() if mark in system + last), None)
        key = hashlib.sha256(json.dumps(first).encode()).digest()
        if cond is None or key[0] % 5:
            return planned
        if not reask:
            refused[cond] = refused.get(cond, 0) + 1
        return completion(REFUSALS[key[1] % len(REFUSALS)])

    return handler


@pytest.mark.timeout(600)
def test_icl_refusals_are_counted_and_never_judged(tmp_path, httpserver):
    """A model that refuses some trials, and again when re-asked: each trial is lost as ``refused``
    (not ``missing``), never sent to the judge and in no judge mean; the losses table (in the run's
    outputs, stats.md and the summary) counts re-asks and losses by reason per condition, exactly."""
    from test_icl_run import JUDGE_SCORE, ROBOT, make_cfg, scripted

    from cbm.vlm.icl.datasets import make_dataset
    from cbm.vlm.icl.run import run as run_icl

    ds = make_dataset("robot", dict(ROBOT), str(tmp_path / "cache"))
    table = {np.asarray(ds.image(i)).tobytes(): ds.class_names[ds.labels[i]] for i in range(len(ds))}
    refused: dict[str, int] = {}
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(refusing_icl(scripted(table), refused))
    conds = ["E1", "E2", "E3"]
    out = run_icl(make_cfg(tmp_path, httpserver, conditions=conds, episodes={"k_shots": [1]}))
    recs = out["records"]
    n = {c: sum(r["condition"] == c for r in recs) for c in conds}
    assert all(refused.get(c, 0) >= 1 for c in conds) and sum(refused.values()) < len(recs) / 2
    gone = [r for r in recs if r["parsed"]["response"] is None]
    assert len(gone) == sum(refused.values())
    for r in gone:  # refused twice: recorded as such (the condition's other tags missing too), not judged
        assert [i["kind"] for i in r["parsed"]["issues"] if i["tag"] == "response"] == ["refused"]
        assert [i["kind"] for i in r["first_issues"] if i["tag"] == "response"] == ["refused"]
        assert "judge" not in r and r["reply"] in REFUSALS and r["reask"] in REFUSALS
    judge_prompts = [m for req, _ in httpserver.log for m in [json.loads(req.data)["messages"]] if "You are a fair LLM judge" in str(m)]
    assert judge_prompts and not any(x in str(m) for m in judge_prompts for x in REFUSALS)  # not one refusal was sent to the judge
    judge = {r["condition"]: r for r in out["tables"]["judge"]}
    assert {c: judge[c]["judged"] for c in ("E2", "E3")} == {c: n[c] - refused[c] for c in ("E2", "E3")}
    assert all(judge[c][m] == JUDGE_SCORE[c] for c in ("E2", "E3") for m in METRICS if not (c == "E2" and m == "conciseness"))
    losses = {r["condition"]: r for r in out["tables"]["losses"]}
    for c in conds:
        assert losses[c] == {"model": "vlm", "dataset": "robot", "condition": c, "trials": n[c], "reasked": refused[c], "recovered": 0,
                             "lost": refused[c], "lost_request_failed": 0, "lost_refused": refused[c], "lost_missing": 0, "lost_unclosed": 0,
                             "lost_not_in_options": 0, "judge_reasked": losses[c]["judge_reasked"], "judge_recovered": 0,
                             "judge_incomplete": losses[c]["judge_reasked"], "judge_failed": 0,
                             "judge_skipped_refused": 0 if c == "E1" else refused[c]}  # fmt: skip
    # the judge's broken E2 replies (conciseness 7 on the unclosed explanations) are re-asked and broken again
    assert losses["E2"]["judge_reasked"] >= 1 and losses["E1"]["judge_reasked"] == losses["E3"]["judge_reasked"] == 0
    assert sum(r["refused"] for r in out["tables"]["parse_errors"]) == len(gone)  # the parse table's new kind
    run_dir = tmp_path / "run"
    assert (run_dir / "losses.csv").read_text().splitlines()[0].startswith("model,dataset,condition,trials,reasked,recovered,lost,")
    row = f"| vlm | robot | E3 | {n['E3']} | {refused['E3']} | 0 | {refused['E3']} | 0 | {refused['E3']} |"
    assert row in (run_dir / "losses.md").read_text() and row in (run_dir / "stats.md").read_text()
    # a rerun resumes: the refusals stay unjudged, nothing is asked again
    sent = len(httpserver.log)
    again = run_icl(make_cfg(tmp_path, httpserver, conditions=conds, episodes={"k_shots": [1]}))
    assert len(httpserver.log) == sent and again["tables"] == out["tables"]
