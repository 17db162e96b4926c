"""The tolerant reply parsers against a corpus of replies as real models write them: each case's
exact reading (value, or error kind), so a change that reads a reply differently fails here."""

from __future__ import annotations

import pytest

from cbm.core.tags import clean_reply, parse_choice, parse_score
from cbm.vlm.edct.parse import parse_answer, parse_concepts, parse_verdict
from cbm.vlm.icl.parse import parse_reply

OPTIONS = ["Glorp", "Drent"]

ANSWERS = [  # reply -> (value, error kind)
    ("<answer>Glorp</answer>", ("Glorp", None)),
    ("<answer>**Glorp**</answer>", ("Glorp", None)),
    ('<answer>"Drent"</answer>', ("Drent", None)),
    ("<answer>\u201cDrent\u201d</answer>", ("Drent", None)),
    ("<answer>The robot is a Glorp.</answer>", ("Glorp", None)),
    ("<answer>Final answer: Drent</answer>", ("Drent", None)),
    ("<answer>This is a Drent, not a Glorp.</answer>", ("Drent", None)),
    ("<answer>glorp.</answer>", ("Glorp", None)),
    ("<ANSWER>Glorp</ANSWER>", ("Glorp", None)),
    ("<think>maybe Drent? <answer>Drent</answer></think>\n<answer>Glorp</answer>", ("Glorp", None)),
    ("Okay, the feet look pointy.</think>\n<answer>Drent</answer>", ("Drent", None)),  # opening <think> stripped by the server
    ("<answer>Glorp</answer><think>second thoughts, never finished", ("Glorp", None)),
    ("<think>a long reasoning that was cut off", (None, "missing")),
    ("```xml\n<answer>Drent</answer>\n```", ("Drent", None)),
    ("&lt;answer&gt;Glorp&lt;/answer&gt;", ("Glorp", None)),
    ("Answer: Glorp", ("Glorp", None)),
    ("**Answer:** Drent\n**Explanation:** pointy feet", ("Drent", None)),
    ("## Final answer: Glorp", ("Glorp", None)),
    ("<final_answer>Drent</final_answer>", ("Drent", None)),
    ("<answer>Glorp", ("Glorp", None)),  # never closed: read to the line end
    ("<answer>Glorp\n<explanation>pointy feet", ("Glorp", None)),
    ("The robot is a Glorp.", ("Glorp", None)),
    ("Glorp", ("Glorp", None)),
    ("It could be a Glorp or a Drent.", (None, "ambiguous")),
    ("<answer>not a Glorp</answer>", (None, "ambiguous")),
    ("<answer>Glorp</answer> <answer>Drent</answer>", (None, "conflicting")),
    ("<answer>Blob</answer>", (None, "not_in_options")),
    ("<answer></answer>", (None, "empty")),
    ("I'm sorry, but I can't help with identifying this robot.", (None, "refused")),
    ("<answer>I cannot determine this from the image.</answer>", (None, "refused")),
    ("I cannot classify this robot from such a small image.", (None, "refused")),
    ("Unfortunately, it is not possible to tell which class this robot belongs to.", (None, "refused")),
    ("<answer>I'm not able to recognise the robot.</answer>", (None, "refused")),
    ("", (None, "missing")),
]


@pytest.mark.parametrize("reply,expected", ANSWERS)
def test_answers_are_read_as_a_person_reads_them(reply, expected):
    r = parse_choice(reply, "answer", OPTIONS, free_text=True)
    assert (r.value, None if r.error is None else r.error.kind) == expected


SCORES = [
    ("<score>4</score>", ("4", None)), ("<score>4/5</score>", ("4", None)), ("<score>4.0</score>", ("4", None)),
    ("<score>**3**</score>", ("3", None)), ("<score>4 out of 5</score>", ("4", None)), ("Score: 4", ("4", None)),
    ("**Score**: 5", ("5", None)), ("<score>Score: 2 - weak evidence</score>", ("2", None)), ("<score>4", ("4", None)),
    ("<score>4.5</score>", (None, "not_in_options")), ("<score>8/10</score>", (None, "not_in_options")),
    ("<score>6</score>", (None, "not_in_options")), ("<score>0</score>", (None, "not_in_options")),
    ("<score>high</score>", (None, "not_in_options")), ("no score given", (None, "missing")),
]  # fmt: skip


@pytest.mark.parametrize("reply,expected", SCORES)
def test_scores_are_integers_on_the_scale_never_rounded(reply, expected):
    r = parse_score(reply, "score")
    assert (r.value, None if r.error is None else r.error.kind) == expected


def test_verdicts_answers_concepts_and_icl_responses():
    v = parse_verdict("**AC:** yes\n**EF:** no\n**Score:** 4/5")
    assert (v.ac, v.ef, v.score, v.errors) == (True, False, 4, [])
    v = parse_verdict("Answer consistency: No\nExplanation faithfulness: true\nScore: 2.0")
    assert (v.ac, v.ef, v.score, v.errors) == (False, True, 2, [])
    v = parse_verdict("<think><ac>no</ac></think><ac>Yes, the answer changed as expected.</ac><ef>yes</ef><score>5</score>")
    assert (v.ac, v.ef, v.score) == (True, True, 5)
    a = parse_answer("Sure!\n<answer>Glorp</answer>\nHope this helps.", OPTIONS)
    assert a.answer == "Glorp" and a.explanation == "Sure! Hope this helps." and a.errors == []
    a = parse_answer("It is a Drent because its feet are pointy.", OPTIONS)
    assert a.answer == "Drent" and a.explanation == "It is a Drent because its feet are pointy."
    assert parse_answer("<answer>Glorp</answer>", OPTIONS).errors[0].kind == "missing"  # no explanation at all
    assert parse_concepts("The explanation cites:\n1. **feet**\n2. the mouth: round\n- eyes", 2) == (["feet", "the mouth"], [])
    assert parse_concepts("<think><concept>eyes</concept></think><concept>feet</concept>", 2) == (["feet"], [])
    p = parse_reply("<think>class 1?</think><response>The query shows class 2.</response>", "E1", ["1", "2", "3"])
    assert p.response == "2" and p.ok
    p = parse_reply("<response>**Star hands**</response>", "E1", ["star hands", "round hands"])
    assert p.response == "star hands"
    assert parse_reply("<response>class 1 or 2</response>", "E1", ["1", "2"]).response is None


#: ICL replies (E1 unless named) -> (label, issue kinds): the shared parser's reading of a tag left
#: out or never closed, and its refusal test, in cbm.vlm.icl.parse.
ICL_OPTIONS = ["star hands", "ball hands", "claw hands"]
ICL_REPLIES = [
    ("<response>ball hands</response>", ("ball hands", [])),
    ("The hands are round balls.\n<response>ball hands", ("ball hands", [])),  # the final tag never closed: read to the line end
    ("**Response:** claw hands", ("claw hands", [])),
    ("Looking at the examples, the query matches the second one.\n\n**Response:** **Ball hands**", ("ball hands", [])),
    ("Response: star hands", ("star hands", [])),
    ("<final_response>star hands</final_response>", ("star hands", [])),
    ("I'm unable to classify this image without more context.", (None, ["refused"])),
    ("I'm sorry, but I can't classify the query robot from these examples.", (None, ["refused"])),
    ("<response>I cannot determine the class from this image.</response>", (None, ["refused"])),
    ("<response>I can't tell", (None, ["refused"])),
    ("<response>wing hands</response>", (None, ["not_in_options"])),
    ("<response>wing hands", (None, ["unclosed"])),
    ("The query is probably star hands.", (None, ["missing"])),
    ("star hands</response>", (None, ["missing", "orphan"])),
]


@pytest.mark.parametrize("reply,expected", ICL_REPLIES)
def test_icl_replies_are_read_by_the_shared_parser(reply, expected):
    p = parse_reply(reply, "E1", ICL_OPTIONS)
    assert (p.response, p.kinds()) == expected


def test_icl_refusals_and_untagged_responses_under_every_condition():
    e3 = "<features>\n- round hands\n- square head\n</features>\n**Response:** ball hands"
    assert (parse_reply(e3, "E3", ICL_OPTIONS).response, parse_reply(e3, "E3", ICL_OPTIONS).kinds()) == ("ball hands", [])
    e2 = "<explanation>The hands are claws.</explanation>\n<response>claw hands"
    assert (parse_reply(e2, "E2", ICL_OPTIONS).response, parse_reply(e2, "E2", ICL_OPTIONS).kinds()) == ("claw hands", [])
    e4 = "<features>\n- hand shape: ?\n</features>\nI'm sorry, I cannot determine the class of this robot."
    p = parse_reply(e4, "E4", ICL_OPTIONS)  # the missing E4 tags are still format errors; the response is a refusal
    assert p.response is None and p.kinds() == ["missing", "refused"] and [i.tag for i in p.issues if i.kind == "missing"] == ["kb", "rule_check"]


def test_clean_reply_keeps_the_answer_part():
    assert clean_reply("<think>x</think>A").strip() == "A"
    assert clean_reply("r</thinking>\nB") == "\nB"
    assert clean_reply("C<think>unfinished") == "C"
    assert clean_reply("```json\nD\n```") == "\nD\n"
    assert clean_reply(None) == ""
