"""EDCT's baseline protocol (``baseline_turns``): the paper's two turns and the one-prompt protocol
both resume from their records without a request; a run written before the knob existed (one turn,
no two-turn prompts in its config) resumes with ``baseline_turns=1`` and is refused in one line with
the default 2; an unreadable explanation in turn 2 is re-asked in the same conversation."""

from __future__ import annotations

import json

import pytest
from chat_stub import completion, explain_turn
from test_edct import expected_chain, make_cfg, prompts, scripted

from cbm.vlm.edct.config import TWO_TURN_PROMPTS
from cbm.vlm.edct.run import run

N = 3


@pytest.mark.parametrize("turns", [1, 2])
def test_each_protocol_resumes_from_its_records_without_a_request(tmp_path, httpserver, turns):
    table, _ = expected_chain(N, tmp_path / "cache")
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(scripted(table))
    first = run(make_cfg(tmp_path, httpserver, items={"n": N}, baseline_turns=turns))
    sent = len(httpserver.log)
    bodies = [json.dumps(json.loads(req.data)["messages"][-1]) for req, _ in httpserver.log]  # each request's last turn
    assert sum("Give your answer" in b for b in bodies) == N + 2 * N  # the baselines and re-queries, ...
    assert sum("Explain your answer" in b for b in bodies) == (N + 2 * N if turns == 2 else 0)  # ... each explained in turn 2
    assert all(("explain" in r["baseline"]) == (turns == 2) and r["baseline"].get("turns", 1) == turns for r in first["records"])
    again = run(make_cfg(tmp_path, httpserver, items={"n": N}, baseline_turns=turns))
    assert len(httpserver.log) == sent  # every reply re-parsed from the records
    assert again["records"] == first["records"] and again["summary"]["ccs"] == first["summary"]["ccs"]


def test_a_run_from_before_the_knob_resumes_as_one_turn_and_the_default_is_refused(tmp_path, httpserver):
    table, _ = expected_chain(N, tmp_path / "cache")
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(scripted(table))
    old_prompts = {k: v for k, v in prompts().items() if k not in TWO_TURN_PROMPTS}  # the config as it was
    first = run(make_cfg(tmp_path, httpserver, items={"n": N}, baseline_turns=1, prompts=old_prompts))
    sent = len(httpserver.log)
    again = run(make_cfg(tmp_path, httpserver, items={"n": N}, baseline_turns=1))  # today's config, one turn
    assert len(httpserver.log) == sent and again["records"] == first["records"]
    with pytest.raises(ValueError) as err:
        run(make_cfg(tmp_path, httpserver, items={"n": N}))  # the default: two turns
    assert str(err.value) == (f"output_dir: {tmp_path / 'run'} holds a cbm-edct run made with other settings (prompts, question, options, "
                              f"answer_by, baseline_turns, k or reask); choose another output_dir, or delete {tmp_path / 'run' / 'run.json'} "
                              "to redo its items with these settings")  # fmt: skip
    assert len(httpserver.log) == sent


def test_an_unreadable_explanation_is_reasked_in_the_same_conversation(tmp_path, httpserver):
    inner = scripted(None)

    def handler(req):
        msgs = json.loads(req.data)["messages"]
        if explain_turn(msgs) and msgs[-1]["role"] == "user" and "could not be read" not in json.dumps(msgs[-1]):
            return completion("Hmm.")  # turn 2, first try: no explanation
        return inner(req)

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(handler)
    out = run(make_cfg(tmp_path, httpserver, items={"n": 1}))
    base = out["records"][0]["baseline"]
    assert base["explanation"] == "Its feet and its mouth decide it."
    assert base["explain"]["reply"] == "Hmm." and base["explain"]["first_errors"] == ["missing: no <explanation> tag in the reply"]
    reask = next(json.loads(req.data)["messages"] for req, _ in httpserver.log if "could not be read" in req.data.decode())
    assert [m["role"] for m in reask] == ["user", "assistant", "user", "assistant", "user"] and reask[3]["content"] == "Hmm."
    assert out["result"]["reasks"]["baseline_explanation"] == {"reasked": 1, "recovered": 1}
    assert out["result"]["parse_errors"] == {}
