"""A checker for the Description-Logic explanations of condition E5.

The model writes a TBox (axioms over ``hasVisualFeature``), an ABox (what the query image has)
and an explanation naming the axioms that fire and the class they entail. The checker parses
all three and decides what actually follows:

* ``C ⊑ hasVisualFeature(F)`` / ``C ⊑ ∃hasVisualFeature.F`` (necessary condition) never
  classifies anything: it says what every C has, not what makes something a C;
* ``hasVisualFeature(F1) ⊓ hasVisualFeature(F2) ⊑ C`` (sufficient condition) and
  ``C ≡ hasVisualFeature(F1) ⊓ ...`` (equivalence) fire when every conjunct is asserted for
  the query individual in the ABox, and then entail ``C``;
* ``C ⊑ D`` propagates an entailed class; ``C ⊓ D ⊑ ⊥`` declares two classes disjoint.
  The episode's classes are mutually exclusive, so two different entailed classes are an
  inconsistency.

The paper's notation (Appendix A.1) is read as written: names in square brackets (``[Persian]
≡ hasVisualFeature([long fur])``), ``hasVisualFeature(Query, F)`` assertions (any case of the
individual) and an explanation listing the fired rules as the axioms' own text (``Rule(s) fired:
[Class3] ≡ hasVisualFeature([F3]) ⊓ hasVisualFeature([F4])``), matched to the TBox's axioms after
normalisation; rules numbered in the TBox (``A1: ...``) may be named by their id instead. ASCII
spellings are accepted (``<=``/``SubClassOf`` for ⊑, ``==``/``EquivalentTo`` for ≡, ``and``/``&``
for ⊓, ``exists hasVisualFeature.F``). The template's own placeholders copied literally
(``[F1]``, ``[Class3]``) are flagged, and a line holding one is no axiom or assertion. :func:`check` scores syntactic validity, whether the claimed
fired axioms are those that fire, whether the entailed class is the ``<response>``, and
consistency; :func:`to_owl` exports the TBox and ABox to OWL (rdflib) for a standard reasoner.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: Kinds of TBox axiom.
NECESSARY, SUFFICIENT, EQUIVALENCE, SUBCLASS, DISJOINT = "necessary", "sufficient", "equivalence", "subclass", "disjoint"

_SUB = r"(?:⊑|⊆|<=|\bSubClassOf\b)"
_EQ = r"(?:≡|==|\bEquivalentTo\b)"
_AND = re.compile(r"\s*(?:⊓|&|\band\b|\bAND\b)\s*")
_ATOM = re.compile(r"^(?:hasVisualFeature\s*\(\s*([^(),]+?)\s*\)|(?:∃|\bexists\b|\bsome\b)\s*hasVisualFeature\s*\.\s*([\w-]+))$", re.IGNORECASE)
_NAME = re.compile(r"^[A-Za-z_][\w-]*$|^\[[^\[\]()⊑≡⊓]+\]$")  # a plain name, or any name in square brackets
_BOTTOM = re.compile(r"^(?:⊥|bottom|owl:Nothing|Nothing)$", re.IGNORECASE)
_PREFIX = re.compile(r"^\s*(?:[-*\u2022]\s*)?(?:\(?([A-Za-z]{0,3}\d+)[.):]\)?\s+)?")
#: The placeholders of the paper's templates ([Class1], [F3], [class2]) and of common ones (<F1>, {Class}).
_PLACEHOLDER = re.compile(r"\[(?:[Cc]lass|F|Feature)\s*\d*\]|<(?:F\d*|C|Class|Feature)>|\{[A-Za-z]\w*\}")
_FEAT_ASSERT = re.compile(r"^hasVisualFeature\s*\(\s*([^(),]+?)\s*,\s*([^(),]+?)\s*\)$", re.IGNORECASE)
_EXISTS_ASSERT = re.compile(r"^([\w-]+)\s*:\s*(?:∃|\bexists\b|\bsome\b)\s*hasVisualFeature\s*\.\s*([\w-]+)$", re.IGNORECASE)
_CLASS_ASSERT = re.compile(r"^([A-Za-z_][\w-]*)\s*\(\s*([\w-]+)\s*\)$")
_COLON_ASSERT = re.compile(r"^([\w-]+)\s*:\s*([A-Za-z_][\w-]*)$")


def norm(name: str) -> str:
    """Names compared case-, space-, underscore-, hyphen- and bracket-insensitively."""
    return re.sub(r"[\s_\-\[\]]+", "", name).lower()


@dataclass(frozen=True)
class Axiom:
    kind: str
    cls: str  # the class classified / constrained (SUBCLASS: the sub-class; DISJOINT: the first class)
    features: frozenset[str] = frozenset()  # normalised feature names (conjuncts)
    other: str = ""  # SUBCLASS: the super-class; DISJOINT: the second class
    text: str = ""
    label: str = ""  # an id the model gave it (A1, R2, ...)

    def key(self) -> tuple:
        return (self.kind, norm(self.cls), self.features, norm(self.other))


@dataclass
class ABox:
    features: dict[str, set[str]] = field(default_factory=dict)  # individual -> feature names (normalised)
    classes: dict[str, set[str]] = field(default_factory=dict)  # individual -> asserted classes (normalised)
    display: dict[str, str] = field(default_factory=dict)  # normalised feature -> as written


def _unwrap(text: str) -> str:
    """``"((a ⊓ b))"`` -> ``"a ⊓ b"``: outer parentheses that enclose the whole text removed."""
    s = text.strip()
    while s.startswith("(") and s.endswith(")"):
        depth = 0
        for i, ch in enumerate(s):
            depth += (ch == "(") - (ch == ")")
            if depth == 0 and i < len(s) - 1:
                return s  # the first "(" closes before the end: not an outer pair
        s = s[1:-1].strip()
    return s


def _side(text: str) -> tuple[str, Any]:
    """``("class", name)``, ``("features", frozenset)``, ``("bottom", None)`` or ``("?", text)``."""
    s = _unwrap(text)
    if _BOTTOM.match(s):
        return "bottom", None
    if _NAME.match(s) and not s.lower().startswith("hasvisualfeature"):
        return "class", s
    parts = [_unwrap(p) for p in _AND.split(s) if p.strip()]
    feats = []
    for p in parts:
        m = _ATOM.match(p)
        if not m:
            if len(parts) == 2 and all(_NAME.match(q) for q in parts):
                return "classes", tuple(parts)
            return "?", text
        feats.append(m.group(1) or m.group(2))
    return "features", frozenset(norm(f) for f in feats)


def parse_axiom(line: str) -> Axiom | None:
    """One TBox axiom, or ``None`` when the line is not one."""
    m = _PREFIX.match(line)
    label = (m.group(1) or "") if m else ""
    body = line[m.end() :] if m else line
    body = body.strip().rstrip(".;,").strip()
    for op, is_eq in ((_EQ, True), (_SUB, False)):
        parts = re.split(op, body)
        if len(parts) != 2:
            continue
        (lk, lv), (rk, rv) = _side(parts[0]), _side(parts[1])
        if is_eq:
            if lk == "class" and rk == "features":
                return Axiom(EQUIVALENCE, lv, rv, text=body, label=label)
            if lk == "features" and rk == "class":
                return Axiom(EQUIVALENCE, rv, lv, text=body, label=label)
            return None
        if lk == "class" and rk == "features":
            return Axiom(NECESSARY, lv, rv, text=body, label=label)
        if lk == "features" and rk == "class":
            return Axiom(SUFFICIENT, rv, lv, text=body, label=label)
        if lk == "class" and rk == "class":
            return Axiom(SUBCLASS, lv, other=rv, text=body, label=label)
        if lk == "classes" and rk == "bottom":
            return Axiom(DISJOINT, lv[0], other=lv[1], text=body, label=label)
        return None
    return None


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in re.split(r"[\n;]", text or "") if ln.strip() and not ln.strip().startswith(("#", "//"))]


def parse_tbox(text: str) -> tuple[list[Axiom], list[str]]:
    """Axioms, and the lines that are not axioms (a template placeholder copied literally included)."""
    axioms, bad = [], []
    for ln in _lines(text):
        ax = None if _PLACEHOLDER.search(ln) else parse_axiom(ln)
        (axioms.append(ax) if ax else bad.append(ln))
    return axioms, bad


def parse_abox(text: str) -> tuple[ABox, list[str]]:
    """Feature and class assertions per individual, and the lines that are neither."""
    box, bad = ABox(), []
    for ln in _lines(text):
        s = _PREFIX.sub("", ln, count=1).strip().rstrip(".,").strip()
        if _PLACEHOLDER.search(s):
            bad.append(ln)
            continue
        if m := _FEAT_ASSERT.match(s):
            ind, f = norm(m.group(1)), m.group(2).strip()
        elif m := _EXISTS_ASSERT.match(s):
            ind, f = norm(m.group(1)), m.group(2).strip()
        elif (m := _CLASS_ASSERT.match(s)) and m.group(1).lower() != "hasvisualfeature":
            box.classes.setdefault(norm(m.group(2)), set()).add(norm(m.group(1)))
            continue
        elif m := _COLON_ASSERT.match(s):
            box.classes.setdefault(norm(m.group(1)), set()).add(norm(m.group(2)))
            continue
        else:
            bad.append(ln)
            continue
        box.features.setdefault(ind, set()).add(norm(f))
        box.display.setdefault(norm(f), f)
    return box, bad


def fired_axioms(axioms: list[Axiom], features: set[str]) -> list[int]:
    """Indices of the sufficient / equivalence axioms all of whose conjuncts are in ``features``."""
    return [i for i, a in enumerate(axioms) if a.kind in (SUFFICIENT, EQUIVALENCE) and a.features and a.features <= features]


def entailed_classes(axioms: list[Axiom], fired: list[int]) -> set[str]:
    """Classes (normalised) the fired axioms entail, closed under ``C ⊑ D``."""
    out = {norm(axioms[i].cls) for i in fired}
    subs = [(norm(a.cls), norm(a.other)) for a in axioms if a.kind == SUBCLASS]
    changed = True
    while changed:
        changed = False
        for c, d in subs:
            if c in out and d not in out:
                out.add(d)
                changed = True
    return out


@dataclass
class Check:
    """The checker's verdict on one E5 output."""

    syntactic_validity: float  # share of TBox + ABox lines that parse
    valid: bool  # every line parses, >= 1 axiom, >= 1 feature assertion, no placeholder
    placeholders: list[str]
    n_axioms: int
    fired: list[str]  # axioms that fire (as written)
    claimed: list[str]  # axioms the explanation claims fire
    foreign: list[str]  # axioms the explanation states as fired that the TBox does not have
    claimed_necessary: bool  # a necessary condition claimed as fired (it never classifies)
    fired_match: bool  # >= 1 rule claimed, claimed == fired, every id it names exists, no axiom outside the TBox
    claim_precision: float | None
    claim_recall: float | None
    entailed: list[str]
    claimed_class: str | None  # the class the explanation concludes
    entails_response: bool  # exactly one class entailed and it is the <response>
    consistent: bool
    problems: list[str]

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


_ATOMS_IN_TEXT = re.compile(r"hasVisualFeature\s*\([^)]*\)|(?:∃|\bexists\b|\bsome\b)\s*hasVisualFeature\s*\.\s*[\w-]+", re.IGNORECASE)
_CLAIM_SPLIT = re.compile(r",|\.\s|\b(?:fires?|fired|applies|hence|therefore|thus|so|because|since)\b", re.IGNORECASE)
#: A short lead-in naming what follows as fired (``Rule(s) fired:``, ``Fired axioms:``, ``- Triggered:``).
_FIRED_LEAD = re.compile(r"^\s*(?:[-*\u2022]\s*)?(?=[^:⊑≡⊓]{0,40}?\b(?:fire[sd]?|firing|triggered)\b)[^:⊑≡⊓]{0,40}?:\s*", re.IGNORECASE)


@dataclass
class Claims:
    """What an E5 explanation says fires: TBox axioms (indices), axioms it states that the TBox does
    not have (``foreign``), ids it names that no axiom has (``unresolved``) and the class it concludes."""

    found: list[int] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    concl: str | None = None


def _claimed(expl: str, axioms: list[Axiom]) -> Claims:
    """The axioms the explanation names: restated as text (the paper's ``Rule(s) fired: <axiom>``,
    matched to the TBox's axioms after normalisation: names, feature order, ASCII spellings) or by
    the id the TBox gave them; an axiom stated that the TBox does not have is ``foreign``. The
    class it concludes is its last ``C(individual)`` / ``individual : C``."""
    keys = {a.key(): i for i, a in enumerate(axioms)}
    labels = {a.label.lower(): i for i, a in enumerate(axioms) if a.label}
    prefixes = {re.match(r"[a-z]*", a.label.lower()).group(0) for a in axioms if a.label} | {"a", "r", "ax"}
    out = Claims()
    for raw in _lines(expl):
        ln = _FIRED_LEAD.sub("", raw, count=1)
        whole = parse_axiom(ln)  # one axiom restated, else each fragment of a line in prose ("... fires, hence ...")
        stated = [whole] if whole is not None else [a for f in _CLAIM_SPLIT.split(ln) if f and f.strip() and (a := parse_axiom(f))]
        for ax in stated:
            (out.found.append(keys[ax.key()]) if ax.key() in keys else out.foreign.append(ax.text))
        if whole is None:  # ids named in the line (feature names such as F1 are not axiom ids)
            for tok in re.findall(r"\b([A-Za-z]{1,3}\d+)\b", _ATOMS_IN_TEXT.sub(" ", raw)):
                if tok.lower() in labels:
                    out.found.append(labels[tok.lower()])
                elif re.match(r"[a-z]+", tok.lower()).group(0) in prefixes:
                    out.unresolved.append(tok)
        for m in re.finditer(r"([A-Za-z_][\w-]*)\s*\(\s*([\w-]+)\s*\)", ln):
            if m.group(1).lower() != "hasvisualfeature":
                out.concl = m.group(1)
        for m in re.finditer(r"\b([\w-]+)\s*:\s*([A-Za-z_][\w-]*)\b", ln):
            out.concl = m.group(2)
    out.found = list(dict.fromkeys(out.found))
    return out


def class_matches(cls: str, response: str | None) -> bool:
    """``Class_2`` / ``class2`` / ``C2`` name label ``2``; a class named like the label matches too."""
    if response is None:
        return False
    c, r = norm(cls), norm(response)
    return c == r or re.sub(r"^(class|label|c)", "", c) == r


def check(tbox: str, abox: str, explanation: str, response: str | None, labels: Sequence[str] = ()) -> Check:
    """Score one E5 output (``response``: the parsed ``<response>`` label, or ``None``; ``labels``:
    the episode's labels, mutually exclusive classes)."""
    axioms, bad_t = parse_tbox(tbox)
    box, bad_a = parse_abox(abox)
    n_lines = len(_lines(tbox)) + len(_lines(abox))
    holders = sorted(set(_PLACEHOLDER.findall("\n".join([tbox or "", abox or "", explanation or ""]))))
    problems = [f"not an axiom: {ln[:60]}" for ln in bad_t] + [f"not an assertion: {ln[:60]}" for ln in bad_a]
    claims = _claimed(explanation, axioms)
    claimed, concl, unresolved = claims.found, claims.concl, claims.unresolved
    inds = list(box.features) or [""]
    ind = inds[0]
    if len(inds) > 1 and concl is not None:  # the individual the explanation classifies
        m = re.search(rf"{re.escape(concl)}\s*\(\s*([\w-]+)\s*\)", explanation or "")
        ind = norm(m.group(1)) if m and norm(m.group(1)) in box.features else ind
    feats = box.features.get(ind, set())
    fired = fired_axioms(axioms, feats)
    entailed = entailed_classes(axioms, fired)
    disjoint = {frozenset((norm(a.cls), norm(a.other))) for a in axioms if a.kind == DISJOINT}
    mains = {norm(axioms[i].cls) for i in fired}
    held = entailed | box.classes.get(ind, set())  # entailed or asserted for the individual
    # the episode's classes are mutually exclusive: at most one of them may hold, and no declared disjoint pair
    held_labels = {lab for lab in labels for c in held if class_matches(c, lab)}
    # an output without an axiom or without an assertion has nothing to check: never matched or consistent
    checkable = bool(axioms) and bool(box.features)
    if not checkable:
        problems.append("nothing to check: no TBox axiom" if not axioms else "nothing to check: no ABox assertion")
    clash = len(held_labels) > 1 or any(frozenset((a, b)) in disjoint for a in held for b in held if a != b)
    consistent = checkable and not clash
    if clash:
        problems.append(f"inconsistent: {sorted(held)} hold together")
    claimed_set, fired_set = set(claimed), set(fired)
    precision = len(claimed_set & fired_set) / len(claimed_set) if claimed_set else None
    recall = len(claimed_set & fired_set) / len(fired_set) if fired_set else None
    necessary = any(axioms[i].kind == NECESSARY for i in claimed)
    if necessary:
        problems.append("a necessary condition (C ⊑ …) is claimed to fire; it never classifies")
    if claimed_set - fired_set and not necessary:
        problems.append("an axiom claimed to fire does not fire for the ABox")
    if unresolved:
        problems.append(f"the explanation names axioms the TBox does not define: {sorted(set(unresolved))}")
    if claims.foreign:
        problems.append(f"the explanation states axioms the TBox does not have: {[t[:60] for t in claims.foreign]}")
    if checkable and not claimed and not claims.foreign and not unresolved:
        problems.append("the explanation names no TBox rule as fired")
    entails_response = len(mains) == 1 and class_matches(next(iter(mains)), response)
    if mains and not entails_response:
        problems.append(f"the fired rules entail {sorted(mains)}, the response is {response!r}")
    if holders:
        problems.append(f"template placeholders copied literally: {holders}")
    return Check(
        syntactic_validity=(n_lines - len(bad_t) - len(bad_a)) / n_lines if n_lines else 0.0,
        valid=n_lines > 0 and not bad_t and not bad_a and bool(axioms) and bool(box.features) and not holders,
        placeholders=holders,
        n_axioms=len(axioms),
        fired=[axioms[i].text for i in fired],
        claimed=[axioms[i].text for i in claimed],
        foreign=claims.foreign,
        claimed_necessary=necessary,
        fired_match=checkable and bool(claimed_set) and claimed_set == fired_set and not unresolved and not claims.foreign,
        claim_precision=precision,
        claim_recall=recall,
        entailed=sorted(entailed),
        claimed_class=concl,
        entails_response=entails_response,
        consistent=consistent,
        problems=problems,
    )


def to_owl(tbox: str, abox: str, base: str = "http://cbm.local/icl#") -> Any:
    """The TBox and ABox as an rdflib ``Graph`` in OWL 2: classes and features as ``owl:Class``,
    ``hasVisualFeature(F)`` as ``∃hasVisualFeature.F``, each asserted feature as an anonymous
    member of F. Run a reasoner on it (e.g. ``owlrl.DeductiveClosure(owlrl.OWLRL_Semantics)``)."""
    from rdflib import BNode, Graph, Namespace
    from rdflib.collection import Collection
    from rdflib.namespace import OWL, RDF, RDFS

    ns = Namespace(base)
    g = Graph()
    g.bind("icl", ns)
    prop = ns.hasVisualFeature
    g.add((prop, RDF.type, OWL.ObjectProperty))
    axioms, _ = parse_tbox(tbox)
    box, _ = parse_abox(abox)

    def cls(name: str):
        node = ns[norm(name)]
        g.add((node, RDF.type, OWL.Class))
        return node

    def conj(features: frozenset[str]):
        parts = []
        for f in sorted(features):
            r = BNode()
            g.add((r, RDF.type, OWL.Restriction))
            g.add((r, OWL.onProperty, prop))
            g.add((r, OWL.someValuesFrom, cls("f_" + f)))
            parts.append(r)
        if len(parts) == 1:
            return parts[0]
        node, lst = BNode(), BNode()
        g.add((node, RDF.type, OWL.Class))
        Collection(g, lst, parts)
        g.add((node, OWL.intersectionOf, lst))
        return node

    for a in axioms:
        if a.kind == SUFFICIENT:
            g.add((conj(a.features), RDFS.subClassOf, cls(a.cls)))
        elif a.kind == NECESSARY:
            g.add((cls(a.cls), RDFS.subClassOf, conj(a.features)))
        elif a.kind == EQUIVALENCE:
            g.add((cls(a.cls), OWL.equivalentClass, conj(a.features)))
        elif a.kind == SUBCLASS:
            g.add((cls(a.cls), RDFS.subClassOf, cls(a.other)))
        elif a.kind == DISJOINT:
            g.add((cls(a.cls), OWL.disjointWith, cls(a.other)))
    for ind, feats in box.features.items():
        node = ns["i_" + ind]
        g.add((node, RDF.type, OWL.NamedIndividual))
        for f in sorted(feats):
            v = ns[f"v_{ind}_{f}"]
            g.add((v, RDF.type, cls("f_" + f)))
            g.add((node, prop, v))
    for ind, classes in box.classes.items():
        for c in classes:
            g.add((ns["i_" + ind], RDF.type, cls(c)))
    return g


def owl_entailed(tbox: str, abox: str, individual: str) -> set[str]:
    """Classes (normalised names) an OWL RL reasoner (owlrl) infers for ``individual``."""
    import owlrl
    from rdflib.namespace import RDF

    base = "http://cbm.local/icl#"
    g = to_owl(tbox, abox, base)
    owlrl.DeductiveClosure(owlrl.OWLRL_Semantics).expand(g)
    node = g.namespace_manager.expand_curie("icl:i_" + norm(individual))
    return {str(o)[len(base) :] for o in g.objects(node, RDF.type) if str(o).startswith(base) and not str(o)[len(base) :].startswith("f_")}
