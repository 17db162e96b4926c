"""The ICL study's parts on exact cases: episodes, the reply parser's error kinds, the
Description-Logic checker (on hand-written outputs, against an OWL RL reasoner), the judge parser
and the statistics against textbook values and scipy / statsmodels reference calls."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cbm.vlm.icl import dl, stats
from cbm.vlm.icl.datasets import ICLDataset
from cbm.vlm.icl.episodes import EpisodeGrid, load_episodes, make_episodes, save_episodes
from cbm.vlm.icl.judge import METRICS, parse_scores, reproducibility
from cbm.vlm.icl.parse import bullet_features, count_issues, parse_reply

LABELS = np.repeat(np.arange(6), 12)  # 6 classes x 12 items
NAMES = [f"class{i}" for i in range(6)]


# ------------------------------------------------------------------ episodes
def test_episode_grid_is_26_runs_disjoint_and_deterministic(tmp_path):
    grid = EpisodeGrid()
    eps = make_episodes("toy", LABELS, NAMES, grid)
    assert grid.n_episodes == len(eps) == 26
    cells = {}
    for e in eps:
        cells[(e.n_way, e.k_shot)] = cells.get((e.n_way, e.k_shot), 0) + 1
        assert e.n_way * cells[(e.n_way, e.k_shot)] <= 12
        assert len(e.support) == e.n_way * e.k_shot and len(e.query) == 1
        sup = {s.index for s in e.support}
        assert len(sup) == len(e.support) and e.query[0].index not in sup  # support and query disjoint
        assert e.labels == e.classes  # the class names are shown (as the paper)
        for s in (*e.support, *e.query):  # every shot's class and label agree with the dataset
            assert NAMES[LABELS[s.index]] == s.cls == e.classes[e.labels.index(s.label)]
        assert sorted(s.cls for s in e.support) == sorted(np.repeat(e.classes, e.k_shot))
    assert cells == {(2, 1): 6, (3, 1): 4, (4, 1): 3, (2, 5): 6, (3, 5): 4, (4, 5): 3}
    assert [e.to_json() for e in make_episodes("toy", LABELS, NAMES, grid)] == [e.to_json() for e in eps]
    assert make_episodes("other", LABELS, NAMES, grid)[0].to_json() != eps[0].to_json()  # seeded per dataset
    ids = make_episodes("toy", LABELS, NAMES, EpisodeGrid(anonymise=True))  # the option: numeric ids in a random order
    assert all(sorted(e.labels) == [str(i) for i in range(1, e.n_way + 1)] for e in ids)
    assert [e.classes for e in ids] != [e.classes for e in eps] or [e.labels for e in ids] != [e.labels for e in eps]
    # saved as JSON and reused; another grid or dataset is refused in one line
    path = tmp_path / "toy.json"
    toy = ICLDataset("toy", NAMES, LABELS, lambda i: None, {"kind": "toy"})
    save_episodes(path, eps, grid, toy.fingerprint)
    assert json.loads(path.read_text())["episodes"][0]["support"][0].keys() == {"index", "cls", "label"}
    assert [e.to_json() for e in load_episodes(path, grid, toy)] == [e.to_json() for e in eps]
    with pytest.raises(ValueError, match="episodes made for other settings"):
        load_episodes(path, EpisodeGrid(seed=1), toy)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not an episodes file"):
        load_episodes(path, grid, toy)


def test_episodes_need_enough_classes_and_items():
    with pytest.raises(ValueError, match="2 classes have >= 6 items .* the grid needs 4"):
        make_episodes("binary", np.repeat([0, 1], 20), ["a", "b"], EpisodeGrid())
    with pytest.raises(ValueError, match="not a multiple of N"):
        EpisodeGrid(n_ways=[5])


# ------------------------------------------------------------------ parser
OPTS = ["1", "2", "3"]


@pytest.mark.parametrize(
    "condition, reply, response, kinds",
    [
        ("E1", "<response>2</response>", "2", []),
        ("E1", "I think <response> Class 2. </response>", "2", []),
        ("E1", "The answer is 2.", None, ["missing"]),
        ("E1", "<response>2", "2", []),  # the final tag never closed: read to the line end
        ("E1", "<response>9", None, ["unclosed"]),
        ("E1", "**Response:** 2", "2", []),
        ("E1", "I cannot classify this image.", None, ["refused"]),
        ("E1", "2</response>", None, ["missing", "orphan"]),
        ("E1", "<response>7</response>", None, ["not_in_options"]),
        ("E1", "<response>1</response><explanation>round head</explanation>", "1", ["extra_tags"]),
        ("E2", "<response>3</response><explanation>pointy feet", "3", ["unclosed"]),
        ("E3", "<response>1</response><features>- star hands\n- pointy feet</features>", "1", []),
        ("E3", "<response>1</response><features>- a</features><kb>IF a THEN 1</kb>", "1", ["extra_tags"]),
        ("E4", "<response>1</response><features>- a</features><kb>IF a THEN 1</kb>", "1", ["missing"]),
        ("E5", "<response>2</response><tbox>A1: Class_2 ≡ hasVisualFeature(X)</tbox><abox>hasVisualFeature(query, X)</abox>"
               "<dl_explanation>A1 fires</dl_explanation>", "2", []),  # fmt: skip
    ],
)
def test_reply_parser_error_kinds(condition, reply, response, kinds):
    p = parse_reply(reply, condition, OPTS)
    assert p.response == response
    assert p.kinds() == sorted(kinds)


def test_parse_counts_and_features():
    ps = [parse_reply("<response>9</response>", "E1", OPTS), parse_reply("", "E4", OPTS), parse_reply("<response>1<kb>", "E1", OPTS),
          parse_reply("<response>x", "E1", OPTS), parse_reply("As an AI, I can't say.", "E1", OPTS)]  # fmt: skip
    assert count_issues(ps) == {"missing": 4, "unclosed": 2, "orphan": 0, "not_in_options": 1, "extra_tags": 1, "refused": 1}
    assert bullet_features("- Star hands.\n* pointy feet\n1. star hands\n\n• round head") == ["star hands", "pointy feet", "round head"]


# ------------------------------------------------------------------ DL checker
TBOX = """A1: Class_1 ≡ hasVisualFeature(StarHands) ⊓ hasVisualFeature(PointyFeet)
A2: Class_2 ⊑ hasVisualFeature(BallHands)
A3: hasVisualFeature(BallHands) ⊓ hasVisualFeature(RoundHead) ⊑ Class_2"""


def test_checker_scores_a_correct_explanation():
    c = dl.check(TBOX, "hasVisualFeature(query, StarHands)\nhasVisualFeature(query, PointyFeet)",
                 "A1 fires. Therefore Class_1(query).", "1", OPTS)  # fmt: skip
    assert (c.valid, c.syntactic_validity, c.n_axioms, c.fired_match, c.entails_response, c.consistent) == (True, 1.0, 3, True, True, True)
    assert c.fired == c.claimed == ["Class_1 ≡ hasVisualFeature(StarHands) ⊓ hasVisualFeature(PointyFeet)"]
    assert (c.claim_precision, c.claim_recall, c.claimed_class, c.problems) == (1.0, 1.0, "Class_1", [])


def test_checker_catches_the_known_failure_kinds():
    # a necessary condition claimed as fired: it never classifies, nothing fires
    c = dl.check(TBOX, "hasVisualFeature(query, BallHands)", "A2 fires, so Class_2(query)", "2", OPTS)
    assert c.claimed_necessary and c.fired == [] and not c.fired_match and not c.entails_response
    # a fired rule whose class differs from the response
    c = dl.check(TBOX, "hasVisualFeature(query, BallHands)\nhasVisualFeature(query, RoundHead)", "A3 fires. Class_2(query)", "1", OPTS)
    assert c.fired_match and not c.entails_response and any("entail ['class2'], the response is '1'" in p for p in c.problems)
    # a claimed rule whose conjuncts are not all asserted does not fire
    c = dl.check(TBOX, "hasVisualFeature(query, StarHands)", "A1 fires. Therefore Class_1(query)", "1", OPTS)
    assert c.fired == [] and not c.fired_match and c.claim_precision == 0.0 and not c.entails_response
    # template placeholders copied literally
    c = dl.check("A1: [Class] ≡ hasVisualFeature([F1]) ⊓ hasVisualFeature([F2])", "hasVisualFeature(query, [F1])", "A1 fires", "1", OPTS)
    assert c.placeholders == ["[Class]", "[F1]", "[F2]"] and not c.valid
    # two exclusive classes entailed: inconsistent
    c = dl.check("hasVisualFeature(A) ⊑ Class_1\nhasVisualFeature(B) ⊑ Class_2", "hasVisualFeature(q, A)\nhasVisualFeature(q, B)", "", "1", OPTS)
    assert not c.consistent and len(c.fired) == 2
    # not axioms at all
    c = dl.check("Class 1 has star hands\nA1: Class_1 ≡ hasVisualFeature(X)", "the robot has star hands", "", "1", OPTS)
    assert c.syntactic_validity == pytest.approx(1 / 3) and not c.valid
    # an empty or junk output has nothing to check: never matched, never consistent
    for tbox, abox, expl in [("", "", ""), ("junk", "more junk", "whatever"), (TBOX, "", "A1 fires")]:
        c = dl.check(tbox, abox, expl, None, ["1", "2"])
        assert not c.fired_match and not c.consistent and any(p.startswith("nothing to check") for p in c.problems)


def test_checker_reads_exists_ascii_and_subclass_forms():
    tbox = "R1: exists hasVisualFeature.StarHands and exists hasVisualFeature.PointyFeet SubClassOf Class_3\nClass_3 <= Spiky"
    c = dl.check(tbox, "query : ∃hasVisualFeature.Star_Hands\nhasVisualFeature(query, pointy feet)", "R1 fires: Class_3(query)", "3", OPTS)
    assert c.valid and c.fired_match and c.entails_response and c.entailed == ["class3", "spiky"]
    eq = dl.check("(∃hasVisualFeature.A ⊓ ∃hasVisualFeature.B) ≡ Class_2", "hasVisualFeature(x, A)\nhasVisualFeature(x, B)",
                  "∃hasVisualFeature.A ⊓ ∃hasVisualFeature.B ≡ Class_2 fires, hence x : Class_2", "2", OPTS)  # fmt: skip
    assert eq.fired_match and eq.entails_response and eq.claimed_class == "Class_2"
    # feature names that look like ids (F1) are not claims of an undefined axiom; an undefined A7 is
    f1 = dl.check("A1: Class_1 ≡ hasVisualFeature(F1)", "hasVisualFeature(q, F1)", "A1: Class_1 ≡ hasVisualFeature(F1) fires. Class_1(q)", "1", OPTS)
    assert f1.fired_match and f1.entails_response
    a7 = dl.check("A1: Class_1 ≡ hasVisualFeature(F1)", "hasVisualFeature(q, F1)", "A1 and A7 fire. Class_1(q)", "1", OPTS)
    assert not a7.fired_match and any("A7" in p for p in a7.problems)


@pytest.mark.parametrize("abox", ["hasVisualFeature(query, StarHands)\nhasVisualFeature(query, PointyFeet)",
                                  "hasVisualFeature(query, BallHands)\nhasVisualFeature(query, RoundHead)",
                                  "hasVisualFeature(query, BallHands)", "hasVisualFeature(query, StarHands)"])  # fmt: skip
def test_checker_entails_what_an_owl_rl_reasoner_entails(abox):
    ours = dl.entailed_classes(*(lambda ax: (ax, dl.fired_axioms(ax, dl.parse_abox(abox)[0].features["query"])))(dl.parse_tbox(TBOX)[0]))
    assert dl.owl_entailed(TBOX, abox, "query") == ours


# ------------------------------------------------------------------ judge
def test_judge_scores_are_parsed_strictly():
    ok = "".join(f"<{m}>{i % 5 + 1}</{m}>" for i, m in enumerate(METRICS))
    s = parse_scores(ok)
    assert s.complete and s.scores == {m: i % 5 + 1 for i, m in enumerate(METRICS)}
    bad = ok.replace("<conciseness>5</conciseness>", "<conciseness>6</conciseness>").replace("<specificity>1</specificity>", "")
    assert parse_scores(ok + "<comprehensibility>4</comprehensibility>").complete  # the same value twice counts once
    bad += "<comprehensibility>2</comprehensibility>"
    s = parse_scores(bad)
    assert set(s.errors) == {"conciseness", "specificity", "comprehensibility"} and s.errors["specificity"] == "missing"
    assert s.errors["comprehensibility"] == "repeated" and s.errors["conciseness"] == "outside 1-5: '6'"
    assert parse_scores("<logical_coherence>4.5</logical_coherence>", ["logical_coherence"]).errors == {"logical_coherence": "not an integer: '4.5'"}
    # as real judges write them: fractions of 5, decimals, bold, a labelled line, a <think> block with other numbers
    real = ("<think>Groundedness maybe <textual_groundedness>1</textual_groundedness>?</think>\n"
            "<textual_groundedness>4/5</textual_groundedness><hallucination_free>**5**</hallucination_free>\n"
            "<concept_counting>3.0</concept_counting>\nComprehensibility: 4\n**Conciseness:** 2 - a bit long")  # fmt: skip
    got = parse_scores(real, METRICS[:5])
    assert got.complete and got.scores == {"textual_groundedness": 4, "hallucination_free": 5, "concept_counting": 3, "comprehensibility": 4, "conciseness": 2}
    assert parse_scores("<specificity>8/10</specificity>", ["specificity"]).errors == {"specificity": "on another scale: '8/10'"}
    assert reproducibility([{"a", "b"}, {"a", "b"}, {"a"}]) == pytest.approx((1 + 0.5 + 0.5) / 3)
    assert reproducibility([{"a"}]) is None


# ------------------------------------------------------------------ statistics
def test_mcnemar_exact_textbook_and_statsmodels():
    from statsmodels.stats.contingency_tables import mcnemar

    a = np.r_[np.ones(10 + 30, bool), np.zeros(2 + 8, bool)]  # a right: 10 discordant + 30 both right
    b = np.r_[np.zeros(10, bool), np.ones(30, bool), np.ones(2, bool), np.zeros(8, bool)]
    r = stats.mcnemar_exact(a, b)
    assert (r["a_only"], r["b_only"]) == (10, 2)
    assert r["p"] == pytest.approx(2 * (1 + 12 + 66) / 4096, rel=1e-12)  # 2 P(X <= 2 | 12, 1/2) = 0.0386
    assert r["p"] == pytest.approx(mcnemar([[30, 10], [2, 8]], exact=True).pvalue, rel=1e-12)
    assert stats.mcnemar_exact([True, False], [True, False])["p"] == 1.0


def test_cochrans_q_against_the_formula():
    t = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [1, 0, 0]], float)
    k, col, row, n = t.shape[1], t.sum(0), t.sum(1), t.sum()
    q = (k - 1) * (k * (col**2).sum() - n**2) / (k * n - (row**2).sum())
    r = stats.cochrans_q(t)
    assert r["q"] == pytest.approx(q) and r["df"] == 2
    from scipy.stats import chi2

    assert r["p"] == pytest.approx(chi2.sf(q, 2))


def test_rank_tests_match_scipy():
    from scipy.stats import friedmanchisquare, spearmanr, wilcoxon

    rng = np.random.default_rng(0)
    a, b, c = rng.integers(1, 6, 30), rng.integers(1, 6, 30), rng.integers(1, 6, 30)
    assert stats.wilcoxon(a, b)["p"] == pytest.approx(wilcoxon(a, b).pvalue)
    assert stats.wilcoxon(a, a)["p"] == 1.0
    for n in (4, 9, 13):  # small samples with ties and zeros: scipy's exact permutation test, enumerated
        x, y = rng.integers(1, 6, n), rng.integers(1, 6, n)
        if np.any(x != y):
            ref = wilcoxon(x, y, zero_method="wilcox")
            assert stats.wilcoxon(x, y)["p"] == pytest.approx(ref.pvalue, abs=1e-12) and stats.wilcoxon(x, y)["stat"] == ref.statistic
    assert stats.friedman(np.c_[a, b, c])["p"] == pytest.approx(friedmanchisquare(a, b, c).pvalue)
    correct = rng.random(30) < 0.5
    rows = stats.spearman_with_correctness({"m1": a, "m2": b, "flat": np.full(30, 3)}, correct, "holm")
    raw = [spearmanr(a, correct).pvalue, spearmanr(b, correct).pvalue]
    assert rows[0]["rho"] == pytest.approx(spearmanr(a, correct).statistic) and math.isnan(rows[2]["rho"])
    lo, hi = sorted(raw)  # Holm over the two testable metrics: min*2, then max(that, max*1)
    holm = {lo: min(1, 2 * lo), hi: min(1, max(2 * lo, hi))}
    assert [rows[0]["p_adj"], rows[1]["p_adj"]] == pytest.approx([holm[raw[0]], holm[raw[1]]])
    bonf = stats.spearman_with_correctness({"m1": a, "m2": b}, correct, "bonferroni")
    assert [r["p_adj"] for r in bonf] == pytest.approx([min(1, 2 * p) for p in raw])


def test_judge_vs_human_agreement():
    r = stats.judge_vs_human([5, 4, 3, 1], [5, 3, 5, 1])
    assert r["twa"] == pytest.approx((1 + 0.75 + 0 + 1) / 4) and r["mae"] == pytest.approx(0.75) and r["n"] == 4
    assert stats.accuracy([True, True, False, False]) == {"n": 4, "acc": 0.5, "se": 0.25}


# ------------------------------------------------------------------ the paper's prompts (Appendix A) and rubric (Appendix C)
def paper_prompts() -> dict:
    from omegaconf import OmegaConf

    from cbm.core.common import CONF_DIR

    return OmegaConf.to_container(OmegaConf.load(f"{CONF_DIR}/icl.yaml").prompts)


#: The shared system prompt's rules, verbatim from Appendix A.1.
PAPER_RULES = [
    "1. Analyze the provided labeled examples to identify the observable visual features that distinguish each class.",
    "2. Examine the Query Image and compare it strictly against the provided examples.",
    "3. Determine which label from the provided options best matches the Query Image.",
    "- Base your decision only on observable visual evidence in the examples and the Query Image.",
    "- Use the examples to infer discriminative visual patterns for each class.",
    "- Do not use external world knowledge, hidden assumptions, or speculative attributes.",
    "- Use only labels from the provided final options list.",
    "- Choose exactly one final label.",
    "- Output only the requested XML tags.",
    "- Do not output any text outside the XML tags.",
    "<response>final_class</response>\n\nThe content of <response> must be exactly one label copied verbatim from the provided options list.",
]


def test_the_system_prompt_keeps_the_papers_rules_and_injects_the_instruction():
    from types import SimpleNamespace

    from cbm.vlm.icl.episodes import Episode, Shot
    from cbm.vlm.icl.run import Trial, trial_messages

    p = paper_prompts()
    ep = Episode("toy", 2, 1, 0, ("cat", "dog"), ("cat", "dog"), (Shot(0, "cat", "cat"), Shot(1, "dog", "dog")), (Shot(2, "dog", "dog"),))
    msgs = trial_messages(SimpleNamespace(prompts=p), SimpleNamespace(image=lambda i: np.zeros((4, 4, 3), np.uint8)), Trial("m", "toy", "E4", ep))
    system = msgs[0]["content"]
    assert msgs[0]["role"] == "system" and all(rule in system for rule in PAPER_RULES)
    # the condition's instruction sits between the rules and the closing <response> line, as {CONDITION_INSTRUCTION} does
    assert system.index("- Do not output any text outside") < system.index(p["instructions"]["E4"]) < system.index("<response>final_class")
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[2]["content"] == "<response>cat</response>" and "Options: cat, dog." in next(p["text"] for p in msgs[-1]["content"] if p["type"] == "text")
    e4, e5 = p["instructions"]["E4"], p["instructions"]["E5"]
    assert "<features>\n- observable feature: feature value\n</features>" in e4
    assert "- IF [observable visual features = feature value] THEN [class2]" in e4
    assert "- [Class3] ≡ hasVisualFeature([F3]) ⊓ hasVisualFeature([F4])\n</tbox>" in e5
    assert "<abox>\n- hasVisualFeature(Query, [F3])\n- hasVisualFeature(Query, [F4])\n</abox>" in e5
    assert "- Rule(s) fired: [Class3] ≡ hasVisualFeature([F3]) ⊓ hasVisualFeature([F4])" in e5
    assert "Do not use natural language—include only the fired TBox rules." in e5
    assert p["instructions"]["E1"] == "Provide only the final class label inside the response tag."


def test_the_judge_prompt_and_rubric_are_the_papers():
    p = paper_prompts()
    for principle in ["- Evaluate the explanation itself, not whether the response is correct or incorrect.",
                      "- Judge only what is explicitly present in the model output.",
                      "- Use the Query image as the source of truth for whether mentioned features are visible."]:  # fmt: skip
        assert principle in p["judge"]
    assert all(f"<{m}>1-5</{m}>" in p["judge"] for m in METRICS) and "{response}" in p["judge"] and "{description}" in p["judge"]
    rubric = p["rubric"]
    assert all(f"({m})" in rubric for m in METRICS)
    # Textual Groundedness is coverage (image -> text), Hallucination-Free the reverse direction
    tg = rubric[rubric.index("(textual_groundedness)") : rubric.index("(hallucination_free)")]
    assert "Every relevant concept in the image is mentioned in the text explanation." in tg
    assert "1 = Not Grounded: Severe omissions of key concepts in the explanation." in tg and "5 = Perfectly Grounded: Zero omissions" in tg
    hf = rubric[rubric.index("(hallucination_free)") : rubric.index("(concept_counting)")]
    assert "Every relevant concept in the explanation is visible in the image." in hf and "5 = Hallucination-free: Zero hallucinations." in hf
    assert "5 = Perfectly Discriminative: 100% pathognomonic features." in rubric
    assert p["descriptions"]["E5"].startswith("The model was asked to classify the Query image and provide a Description Logic (DL)-based")


@pytest.mark.parametrize(
    "system, query, problem",
    [("Rules only.", "Query. Options: {options}.", "neither has it"), ("{instruction}", "{instruction} {options}", "both have it"),
     ("{instruction} {labels}", "Query.", "prompts.system: unknown placeholder(s) ['labels']")],
)  # fmt: skip
def test_the_instruction_is_placed_exactly_once(system, query, problem):
    from cbm.vlm.icl.config import check_prompts

    with pytest.raises(ValueError) as err:
        check_prompts({**paper_prompts(), "system": system, "query": query}, ["E1"])
    assert problem in str(err.value) and "\n" not in str(err.value)
    check_prompts({**paper_prompts(), "system": "", "query": "Query. {instruction}"}, ["E1"])  # the older layout still works


# ------------------------------------------------------------------ E4 feature: value pairs, E5 in the paper's notation
def test_e4_features_are_feature_value_pairs():
    from cbm.vlm.icl.parse import feature_value_pairs, parse_reply
    from cbm.vlm.icl.run import features_of

    body = "- Petal colour: deep red\n- petal count = 5\n* Leaf shape:  lanceolate.\n- spots"
    assert feature_value_pairs(body) == [("petal colour", "deep red"), ("petal count", "5"), ("leaf shape", "lanceolate"), ("spots", "")]
    reply = f"<features>{body}</features><kb>- IF [petal colour = deep red] THEN [rose]</kb><rule_check>- rule 1</rule_check><response>rose</response>"
    assert features_of(parse_reply(reply, "E4", ["rose", "tulip"])) == {"petal colour: deep red", "petal count: 5", "leaf shape: lanceolate", "spots"}
    assert features_of(parse_reply("<features>- red petals\n- thorns</features><response>rose</response>", "E3", ["rose"])) == {"red petals", "thorns"}


PAPER_TBOX = """- [Persian] ⊑ hasVisualFeature([long fur])
- hasVisualFeature([hairless skin]) ⊑ [Sphynx]
- [Bengal] ≡ hasVisualFeature([spotted coat]) ⊓ hasVisualFeature([green eyes])"""
PAPER_ABOX = "- hasVisualFeature(Query, [spotted coat])\n- hasVisualFeature(QUERY, [green eyes])"
CATS = ["Persian", "Sphynx", "Bengal"]


@pytest.mark.parametrize("claim", ["- Rule(s) fired: [Bengal] ≡ hasVisualFeature([spotted coat]) ⊓ hasVisualFeature([green eyes])",
                                   "Rule(s) fired: Bengal ≡ hasVisualFeature(GreenEyes) ⊓ hasVisualFeature(Spotted_Coat)"])  # fmt: skip
def test_checker_reads_the_papers_notation(claim):
    c = dl.check(PAPER_TBOX, PAPER_ABOX, claim, "Bengal", CATS)
    assert (c.valid, c.syntactic_validity, c.n_axioms, c.fired_match, c.entails_response, c.consistent) == (True, 1.0, 3, True, True, True)
    assert c.fired == c.claimed == ["[Bengal] ≡ hasVisualFeature([spotted coat]) ⊓ hasVisualFeature([green eyes])"]
    assert (c.foreign, c.placeholders, c.problems, c.claim_precision, c.claim_recall) == ([], [], [], 1.0, 1.0)


def test_checker_refuses_claims_outside_the_tbox_and_empty_ones():
    # a fired rule the TBox does not have (one conjunct fewer): not matched, named
    c = dl.check(PAPER_TBOX, PAPER_ABOX, "- Rule(s) fired: [Bengal] ≡ hasVisualFeature([spotted coat])", "Bengal", CATS)
    assert not c.fired_match and c.claimed == [] and c.foreign == ["[Bengal] ≡ hasVisualFeature([spotted coat])"]
    assert "the explanation states axioms the TBox does not have: ['[Bengal] ≡ hasVisualFeature([spotted coat])']" in c.problems
    # a necessary condition restated as fired
    c = dl.check(PAPER_TBOX, "- hasVisualFeature(Query, [long fur])", "- Rule(s) fired: [Persian] ⊑ hasVisualFeature([long fur])", "Persian", CATS)
    assert c.claimed_necessary and not c.fired_match and c.fired == []
    # no rule named, or junk: never matched; empty or junk boxes: nothing to check, never consistent
    for expl in ("", "- Rule(s) fired:", "the cat looks spotted"):
        c = dl.check(PAPER_TBOX, PAPER_ABOX, expl, "Bengal", CATS)
        assert not c.fired_match and c.consistent and "the explanation names no TBox rule as fired" in c.problems
    for tbox, abox in (("", ""), ("junk", "more junk"), (PAPER_TBOX, "")):
        c = dl.check(tbox, abox, "- Rule(s) fired: [Bengal] ≡ hasVisualFeature([spotted coat]) ⊓ hasVisualFeature([green eyes])", "Bengal", CATS)
        assert not c.fired_match and not c.consistent
    # the template copied literally: every line holds a placeholder, so nothing is read
    c = dl.check("- [Class3] ≡ hasVisualFeature([F3]) ⊓ hasVisualFeature([F4])", "- hasVisualFeature(Query, [F3])",
                 "- Rule(s) fired: [Class3] ≡ hasVisualFeature([F3]) ⊓ hasVisualFeature([F4])", "Bengal", CATS)  # fmt: skip
    assert c.placeholders == ["[Class3]", "[F3]", "[F4]"] and (c.n_axioms, c.valid, c.fired_match, c.consistent) == (0, False, False, False)
    # the numbered form still works, named by id after a lead-in
    c = dl.check("A1: [Bengal] ≡ hasVisualFeature([spots])", "hasVisualFeature(query, spots)", "Rule(s) fired: A1", "Bengal", CATS)
    assert c.fired_match and c.entails_response


# ------------------------------------------------------------------ tables as the paper, Spearman over metric x condition
def hand_records() -> list[dict]:
    """Two models x two datasets x E1, E2; per (model, dataset, condition) four 2-way 1-shot and
    two 3-way 5-shot trials with planned outcomes; E2 judged with planned scores."""
    plan = {("a", "x"): [1, 1, 1, 0, 1, 1], ("a", "y"): [1, 1, 0, 0, 0, 1], ("b", "x"): [1, 1, 1, 1, 1, 1], ("b", "y"): [0, 0, 0, 0, 1, 0]}
    recs = []
    for (m, d), outcomes in plan.items():
        for c in ("E1", "E2"):
            for i, ok in enumerate(outcomes if c == "E1" else outcomes[::-1]):
                r = {"status": "answered", "model": m, "dataset": d, "condition": c, "correct": bool(ok), "n_way": 2 if i < 4 else 3,
                     "k_shot": 1 if i < 4 else 5}  # fmt: skip
                if c == "E2":
                    r["judge"] = {"complete": True, "scores": dict.fromkeys(METRICS, 1 + i % 5)}
                recs.append(r)
    recs.append({"status": "error", "model": "a", "dataset": "x", "condition": "E1", "n_way": 2, "k_shot": 1})  # no answer: in no table
    return recs


def test_accuracy_tables_by_model_dataset_and_nk_are_exact():
    from cbm.vlm.icl.tables import accuracy_by, accuracy_nk_rows, judge_by_condition_rows, paper_tables_md

    recs = hand_records()
    by_model = {(r["condition"], r["model"]): r for r in accuracy_by(recs, "model", ["E1", "E2"])}
    assert [k for k in by_model] == [("E1", "a"), ("E1", "b"), ("E2", "a"), ("E2", "b")]
    a = by_model[("E1", "a")]  # 5 + 3 of 12 over the two datasets
    assert (a["n"], a["accuracy"], a["se"]) == (12, 8 / 12, pytest.approx(math.sqrt(8 / 12 * 4 / 12 / 12)))
    assert by_model[("E1", "b")]["accuracy"] == 7 / 12 and by_model[("E2", "a")]["accuracy"] == 8 / 12  # the same outcomes, reversed
    by_ds = {(r["condition"], r["dataset"]): r for r in accuracy_by(recs, "dataset", ["E1", "E2"])}
    assert (by_ds[("E1", "x")]["n"], by_ds[("E1", "x")]["accuracy"], by_ds[("E1", "y")]["accuracy"]) == (12, 11 / 12, 4 / 12)
    nk = {(r["model"], r["dataset"], r["condition"], r["n_way"], r["k_shot"]): r for r in accuracy_nk_rows(recs, ["E1", "E2"])}
    assert len(nk) == 2 * 2 * 2 * 2 and nk[("a", "y", "E1", 2, 1)]["accuracy"] == 0.5 and nk[("a", "y", "E1", 2, 1)]["n"] == 4
    assert nk[("a", "y", "E1", 3, 5)]["accuracy"] == 0.5 and nk[("a", "y", "E1", 3, 5)]["n"] == 2
    assert nk[("b", "y", "E2", 2, 1)]["accuracy"] == 0.25  # [0, 1, 0, 0, 0, 0] reversed: the first four
    judge = judge_by_condition_rows(recs, ["E1", "E2"])
    assert [r["condition"] for r in judge] == ["E2"] * len(METRICS)  # E1 unjudged: no row
    scores = [1, 2, 3, 4, 5, 1] * 4
    assert judge[0]["n"] == 24 and judge[0]["mean"] == pytest.approx(np.mean(scores))
    assert judge[0]["se"] == pytest.approx(np.std(scores, ddof=1) / math.sqrt(24))
    tables = {"accuracy_by_model": list(by_model.values()), "accuracy_by_dataset": list(by_ds.values()),
              "accuracy_by_nk": list(nk.values()), "judge_by_condition": judge}  # fmt: skip
    md = paper_tables_md(tables)
    se = 100 * math.sqrt(8 / 12 * 4 / 12 / 12)
    assert f"| E1 | 66.7 ({se:.1f}), n = 12 | 58.3 (" in md and "| E2 | 2.67 (0." in md
    assert "Accuracy (%) of a by dataset, condition, N and K (Appendix D)" in md and "| y / E1 | 50.0 (4) | 50.0 (2) |" in md


def test_spearman_is_corrected_over_every_metric_and_condition():
    from scipy.stats import spearmanr

    from cbm.vlm.icl.tables import spearman_by_condition

    rng = np.random.default_rng(1)
    recs = []
    for c in ("E2", "E3", "E4", "E5"):
        for _ in range(40):
            recs.append({"status": "answered", "condition": c, "correct": bool(rng.random() < 0.6),
                         "judge": {"complete": True, "scores": {m: int(rng.integers(1, 6)) for m in METRICS}}})  # fmt: skip
    recs.append({"status": "answered", "condition": "E1", "correct": True})  # unjudged: not in the family
    for method in ("bonferroni", "holm"):
        res = spearman_by_condition(recs, ["E1", "E2", "E3", "E4", "E5"], method)
        assert (res["planned"], res["family"], len(res["rows"])) == (36, 36, 36) and res["correction"] == method
        raw = []
        for r in res["rows"]:
            rs = [x for x in recs if x["condition"] == r["condition"]]
            ref = spearmanr([x["judge"]["scores"][r["metric"]] for x in rs], [x["correct"] for x in rs])
            assert r["n"] == 40 and r["rho"] == pytest.approx(ref.statistic) and r["p"] == pytest.approx(ref.pvalue)
            raw.append(ref.pvalue)
        if method == "bonferroni":  # the paper: p x 36
            assert [r["p_adj"] for r in res["rows"]] == pytest.approx([min(1.0, 36 * p) for p in raw])
        else:
            from statsmodels.stats.multitest import multipletests

            assert [r["p_adj"] for r in res["rows"]] == pytest.approx(list(multipletests(raw, method="holm")[1]))
    # a constant metric is no test: the family shrinks, the plan does not
    for r in recs:
        if r["condition"] == "E5":
            r["judge"]["scores"]["conciseness"] = 5
    res = spearman_by_condition(recs, ["E2", "E3", "E4", "E5"], "bonferroni")
    assert (res["planned"], res["family"]) == (36, 35)
    row = next(r for r in res["rows"] if r["condition"] == "E2" and r["metric"] == "conciseness")
    assert row["p_adj"] == pytest.approx(min(1.0, 35 * row["p"]))


def test_a_refused_trial_loses_a_judgement_saved_before_refusals_were_skipped():
    """A record written when refusals were still judged: rebuilt on resume, its judgement is dropped
    (in no judge mean); a labelled trial's stays. The losses table counts it by reason."""
    from cbm.vlm.icl.episodes import Episode, Shot
    from cbm.vlm.icl.run import Trial, rebuild_record
    from cbm.vlm.icl.tables import loss_rows

    ep = Episode("robot", 2, 1, 0, ("a", "b"), ("1", "2"), (Shot(0, "a", "1"), Shot(1, "b", "2")), (Shot(2, "a", "1"),))
    t = Trial("vlm", "robot", "E2", ep)
    judge = {"reply": "".join(f"<{m}>1</{m}>" for m in METRICS)}
    no = rebuild_record(t, {"trial": t.id, "status": "answered", "reply": "I'm sorry, I cannot classify this image.", "judge": judge})
    yes = rebuild_record(t, {"trial": t.id, "status": "answered", "reply": "<explanation>round</explanation><response>1</response>", "judge": judge})
    assert "judge" not in no and [i["kind"] for i in no["parsed"]["issues"] if i["tag"] == "response"] == ["refused"]
    assert yes["judge"]["complete"] and yes["correct"]
    (row,) = loss_rows([no, yes], judged=["E2"])
    assert (row["trials"], row["lost"], row["lost_refused"], row["lost_missing"], row["judge_skipped_refused"]) == (2, 1, 1, 0, 1)
