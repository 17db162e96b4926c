"""The EDCT pipeline, item by item, every stage saved so a run resumes where it stopped.

For each item: the VLM's baseline answer + explanation -> the LLM extracts up to ``k`` cited
visual concepts (ranked) -> one LLM call writes the edit chain (Keep / Change / How /
Constraints, chronological) -> for each edit: the editor makes the counterfactual from the
previous step's image, the verifier checks the edit is local (one retry), the VLM answers again,
the judge scores Answer Consistency, Explanation Faithfulness and a 1-5 rubric. With the
synthetic editors the true label of every counterfactual is known (``known_change``).

Layout of ``output_dir``: ``run.json`` (the digests of the settings that shape a record, sealed:
a rerun with other settings is refused in one line, see :mod:`cbm.vlm.edct.records`),
``items/<id>/record.json`` (every stage's parsed output, replies, errors, status, and the sha256
of every image the item's steps wrote), ``items/<id>/original.png``, ``items/<id>/step<i>.png`` /
``step<i>_mask.png``, and the run's ``results.json`` / ``results.md`` / ``usage.json``. Replies
are also in the client's disk cache.

A record is a resume point: on a rerun only its reply texts are kept and every parsed value (the
answers, the cited concepts, the edit chain, the judge's verdicts, answer changes, the true labels
of the edited items) is derived from them again (:meth:`Pipeline.rebuild`), so a record whose
digest was recomputed cannot put a verdict or a score the judge never gave into the tables.
"""

from __future__ import annotations

import hashlib
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from cbm.core.atomic import atomic_write, write_json_atomic
from cbm.core.concurrency import drain
from cbm.core.progress import progress_bar_wanted
from cbm.core.safe_paths import inside, slug, slugs
from cbm.vlm.client import ChatClient
from cbm.vlm.config import ClientConfig
from cbm.vlm.edct.config import PROMPT_DEFAULTS, EDCTConfig
from cbm.vlm.edct.metrics import EXCLUSIONS, exclusion, exclusion_counts
from cbm.vlm.edct.parse import (
    parse_answer,
)
from cbm.vlm.edct.records import (
    check_run,
    load_record,
    png_bytes,
    run_id,
    save_record,
    settings_parts,
    valid_record,
    write_png,
)
from cbm.vlm.editors.base import EditError, EditInstruction, EditItem, edit_prompt, edit_type
from cbm.vlm.images import load_image
from cbm.vlm.messages import reask_turns, user_message
from cbm.vlm.reply import ChatError

__all__ = ["EXCLUSIONS", "Clients", "Pipeline", "exclusion", "exclusion_counts", "load_segmenter", "parse_error_counts", "status_counts",
           "valid_record"]

log = logging.getLogger("cbm.vlm")

#: Item statuses a rerun keeps (``done`` = chain finished); ``error`` (the endpoint failed after its
#: retries) is picked up again where it stopped.
from cbm.vlm.edct.counts import parse_error_counts, reask_counts, status_counts  # noqa: E402,F401 (run.py reads them here)
from cbm.vlm.edct.ledger import LEDGER, add_usage, read_ledger  # noqa: E402,F401
from cbm.vlm.edct.saved import (  # noqa: E402
    TWO_TURNS,
    _answer,
    _answer_turn,
    _chain,
    _concepts,
    _plain,
    _step_meta,
    _verdict,
    options_text,
    same_answer,
)

TERMINAL = ("done", "baseline_unparsed", "no_concepts", "no_chain")
#: Step statuses that are final: ``judged``; ``stopped`` (the chain ends: an edit failed or was not
#: local); ``unscored`` (the re-query could not be read: excluded from every score, the chain goes on).
FINISHED_STEPS = ("judged", "stopped", "unscored")
#: The explanation's tags (a local model's reply is opened with the first: ``answer_by=score``).
EXPLANATION_OPEN, EXPLANATION_CLOSE = "<explanation>", "</explanation>"


class Clients:
    """The run's clients: the VLM under test, the LLM (extraction, edit chain) and the judge(s)."""

    def __init__(self, cfg: EDCTConfig, http_client: Any | None = None):
        def make(settings: dict | None) -> ChatClient | None:
            return None if settings is None else ChatClient(ClientConfig.from_mapping(dict(settings)), http_client=http_client)

        self.vlm = make(cfg.vlm)
        self.llm = make(cfg.llm) if dict(cfg.llm) != dict(cfg.vlm) else self.vlm
        self.judge = make(cfg.judge) if dict(cfg.judge) != dict(cfg.llm) else self.llm
        self.judge2 = make(cfg.judge2)

    def usage(self) -> dict[str, Any]:
        """This invocation's requests, tokens and cost per client (cache hits cost nothing)."""
        seen, out = set(), {}
        for role in ("vlm", "llm", "judge", "judge2"):
            c = getattr(self, role)
            if c is not None and id(c) not in seen:
                seen.add(id(c))
                out[role] = {"model": c.model, **c.usage.to_json()}
        return out


def _sha256_of(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class Pipeline:
    #: The digest of the run's settings (:func:`~cbm.vlm.edct.records.run_id`) its records carry.
    run_id: str = ""

    def __init__(self, cfg: EDCTConfig, clients: Clients, editor: Any, label_of: Any | None = None):
        self.cfg = cfg
        self.clients = clients
        self.editor = editor
        self.label_of = label_of  # meta -> true class name (synthetic items), else None
        self.root = Path(cfg.output_dir) / "items"
        from cbm.vlm.verify import VerifyConfig

        self.verify_cfg = VerifyConfig(**dict(cfg.verify))
        self.segmenter = load_segmenter(cfg.segmenter) if cfg.segmenter is not None else None
        self.parts = settings_parts(cfg, clients)
        self.run_id = run_id(self.parts)  # every record of this run carries it

    # ----------------------------------------------------------------- stages
    def _prompt(self, name: str, **fields: Any) -> str:
        return self.cfg.prompts[name].format(**fields)

    def reask(self, client: ChatClient, msgs: list, reply: str, errors: list[str]) -> str | None:
        """The reply to one re-ask, in the same conversation, naming what could not be read
        (``None`` when ``reask`` is 0)."""
        if not self.cfg.reask:
            return None
        return client.chat(self._reask_messages(msgs, reply, errors)).text

    def _reask_messages(self, msgs: list, reply: str, errors: list[str]) -> list:
        """The conversation of a re-ask: ``msgs``, the unreadable ``reply`` and the re-ask prompt."""
        return reask_turns(msgs, reply, self.cfg.prompts.get("reask", PROMPT_DEFAULTS["reask"]), "; ".join(errors))

    def item_task(self, item: EditItem, options: list[str]) -> tuple[str, list[str]]:
        """The question and answer options of ``item``: its own (items read from files) or the run's;
        no options: open-ended."""
        meta = item.meta if isinstance(item.meta, dict) else {}
        return meta.get("question") or self.cfg.question, list(meta.get("options") or options)

    def ask_vlm(self, image: Image.Image, options: list[str], question: str | None = None) -> dict[str, Any]:
        """The VLM's answer and explanation for ``image`` (generated, or option-scored then explained),
        in one prompt or two turns of one conversation (``baseline_turns``); an unreadable answer
        (or, with two turns, explanation) is re-asked once (``reask``)."""
        if self.cfg.baseline_turns == TWO_TURNS:
            return self._ask_two_turns(image, options, question)
        vlm = self.clients.vlm
        msgs = vlm.messages(self._prompt("answer", question=question or self.cfg.question, options=options_text(options)), [image])
        if self.cfg.answer_by == "score" and options:
            scores = vlm.score(msgs, "<answer>", options)
            answer = options[int(np.argmax(scores))]
            reply = vlm.chat(msgs, prefix=f"<answer>{answer}</answer>\n{EXPLANATION_OPEN}").text
            if EXPLANATION_CLOSE not in reply:
                reply += EXPLANATION_CLOSE
            parsed = parse_answer(reply, options)
            return {"answer": parsed.answer, "explanation": parsed.explanation, "scores": scores, "reply": reply,
                    "errors": [str(e) for e in parsed.errors]}  # fmt: skip
        reply = vlm.chat(msgs).text
        out = _answer({"reply": reply}, options)
        if out["answer"] is None and (again := self.reask(vlm, msgs, reply, out["errors"])) is not None:
            out = _answer({"reply": reply, "reask": again}, options)
        return out

    def _ask_two_turns(self, image: Image.Image, options: list[str], question: str | None) -> dict[str, Any]:
        """The paper's protocol: turn 1 asks (image, question) for the answer only (``answer_only``;
        with ``answer_by=score`` the best-scored option is turn 1's reply, and turn 2's reply is
        opened with ``<explanation>``), turn 2, in the same conversation with turn 1's reply (and
        its re-ask) kept, asks for the explanation (``explain``). Each turn is re-asked once when unreadable; no turn 2 without an answer."""
        vlm = self.clients.vlm
        q = question or self.cfg.question
        msgs = vlm.messages(self._prompt_or_default("answer_only", question=q, options=options_text(options)), [image])
        saved: dict[str, Any] = {"turns": TWO_TURNS}
        if self.cfg.answer_by == "score" and options:
            saved["scores"] = vlm.score(msgs, "<answer>", options)
            saved["reply"] = f"<answer>{options[int(np.argmax(saved['scores']))]}</answer>"
        else:
            saved["reply"] = vlm.chat(msgs).text
        convo = [*msgs, {"role": "assistant", "content": saved["reply"]}]
        first = _answer_turn(saved, options)
        if first["answer"] is None and (again := self.reask(vlm, msgs, saved["reply"], first["errors"])) is not None:
            saved["reask"] = again
            convo = [*self._reask_messages(msgs, saved["reply"], first["errors"]), {"role": "assistant", "content": again}]
        if _answer_turn(saved, options)["answer"] is None:
            return _answer(saved, options)
        ask = [*convo, user_message(self._prompt_or_default("explain", question=q))]
        if self.cfg.answer_by == "score" and options:  # a local model: its explanation opened for it, as with one turn
            reply = vlm.chat(ask, prefix=EXPLANATION_OPEN).text
            saved["explain"] = {"reply": reply if EXPLANATION_CLOSE in reply else reply + EXPLANATION_CLOSE}
        else:
            saved["explain"] = {"reply": vlm.chat(ask).text}
        out = _answer(saved, options)
        if out["explanation"] is None and (again := self.reask(vlm, ask, saved["explain"]["reply"], out["explain"]["errors"])) is not None:
            saved["explain"]["reask"] = again
            out = _answer(saved, options)
        return out

    def _prompt_or_default(self, name: str, **fields: Any) -> str:
        return self.cfg.prompts.get(name, PROMPT_DEFAULTS[name]).format(**fields)

    def judge(self, client: ChatClient, base: dict, step: dict, options: list[str], question: str | None = None) -> dict[str, Any]:
        prompt = self._prompt("judge", question=question or self.cfg.question, options=options_text(options), answer=base["answer"],
                              explanation=base["explanation"] or "", edit=step["edit_text"],
                              new_answer=step["requery"]["answer"] or "(no answer)", new_explanation=step["requery"]["explanation"] or "")  # fmt: skip
        msgs = client.messages(prompt)
        reply = client.chat(msgs).text
        out = _verdict({"reply": reply})
        if out["errors"] and (again := self.reask(client, msgs, reply, out["errors"])) is not None:
            out = _verdict({"reply": reply, "reask": again})
        return out

    # ----------------------------------------------------------------- one item
    def run_item(self, item_id: str, item: EditItem, options: list[str]) -> dict[str, Any]:
        d = inside(self.root, self.root / slug(item_id), "EDCT item id")  # ids may come from data: slugged
        path = d / "record.json"
        original = png_bytes(item.image)
        image_sha = hashlib.sha256(original).hexdigest()
        saved = self._load(path, item_id, image_sha)
        question, options = self.item_task(item, options)
        rec = self.rebuild(saved, item, options) if saved is not None else {"id": item_id, "status": "started"}
        rec.update(run=self.run_id, image_sha256=image_sha, question=question, options=options)
        if self.label_of is not None:
            rec["truth"] = self.label_of(item.meta)
        if _sha256_of(d / "original.png") != image_sha:
            atomic_write(d / "original.png", lambda f: f.write(original))

        def save() -> None:
            save_record(path, rec)

        if rec["status"] in TERMINAL:
            if rec != saved:  # what the tables use is what the file holds
                save()
            return rec
        rec.pop("error", None)
        try:
            if "baseline" not in rec:
                rec["baseline"] = self.ask_vlm(item.image, options, question)
                save()
            base = rec["baseline"]
            if base["answer"] is None:
                rec["status"] = "baseline_unparsed"
                save()
                return rec
            if "concepts" not in rec:
                llm = self.clients.llm
                msgs = llm.messages(self._prompt("extract", question=question, options=options_text(options),
                                                 answer=base["answer"], explanation=base["explanation"] or "", k=self.cfg.k))  # fmt: skip
                reply = llm.chat(msgs).text
                rec["concepts"] = _concepts({"reply": reply}, self.cfg.k)
                if not rec["concepts"]["concepts"] and rec["concepts"]["errors"]:
                    if (again := self.reask(llm, msgs, reply, rec["concepts"]["errors"])) is not None:
                        rec["concepts"] = _concepts({"reply": reply, "reask": again}, self.cfg.k)
                save()
            concepts = rec["concepts"]["concepts"]
            if not concepts:
                rec["status"] = "no_concepts"
                save()
                return rec
            if "chain" not in rec:
                listing = "\n".join(f"{i + 1}. {c}" for i, c in enumerate(concepts))
                llm = self.clients.llm
                msgs = llm.messages(self._prompt("chain", question=question, answer=base["answer"],
                                                 explanation=base["explanation"] or "", concepts=listing, n=len(concepts)))  # fmt: skip
                reply = llm.chat(msgs).text
                rec["chain"] = _chain({"reply": reply}, concepts)
                if not rec["chain"]["edits"] and (again := self.reask(llm, msgs, reply, rec["chain"]["errors"])) is not None:
                    rec["chain"] = _chain({"reply": reply, "reask": again}, concepts)
                save()
            chain = [EditInstruction(**e) for e in rec["chain"]["edits"]]
            if not chain:
                rec["status"] = "no_chain"
                save()
                return rec
            self._run_chain(rec, d, item, chain, options, save, question)
            rec["status"] = "done"
        except ChatError as err:  # the endpoint failed after its retries: recorded, the run goes on
            rec["status"], rec["error"] = "error", f"{err.kind}: {err}"
        save()
        return rec

    def _run_chain(self, rec: dict, d: Path, item: EditItem, chain: list[EditInstruction], options: list[str], save: Any,
                   question: str | None = None) -> None:  # fmt: skip
        steps: list[dict[str, Any]] = rec.setdefault("steps", [])
        exact = bool(getattr(self.editor, "exact", False))  # the editor's masks are the true changed pixels
        current = item
        base = rec["baseline"]
        for i, instr in enumerate(chain):
            if i < len(steps) and steps[i].get("status") in FINISHED_STEPS:
                if steps[i]["status"] == "stopped":
                    return
                restored = self._restore(item, steps[i], d / f"step{i + 1}.png")
                if restored is not None:
                    current = restored
                    continue  # else the step is made again
            step: dict[str, Any] = {"index": i + 1, "concept": instr.concept, "instruction": asdict(instr), "edit_text": edit_prompt(instr)}
            del steps[i:]
            steps.append(step)
            made = self._edit_verified(step, current, instr, exact)
            if made is None:  # the edit could not be verified: the step stops, its item is excluded from every score
                save()
                return
            result, mask = made
            step["image_sha256"] = write_png(d / f"step{i + 1}.png", result.image)
            if mask is not None:
                step["mask_sha256"] = write_png(d / f"step{i + 1}_mask.png", Image.fromarray(mask.astype(np.uint8) * 255))
            nxt = EditItem(result.image, result.meta if result.meta is not None else current.meta, current.kind)
            if self.label_of is not None and result.meta is not None:
                step["truth"] = self.label_of(result.meta)
                step["known_change"] = step["truth"] != rec["truth"]
                step["meta_row"] = np.asarray(result.meta["row"]).tolist() if isinstance(result.meta, dict) and "row" in result.meta else None
                if isinstance(result.meta, dict) and "board" in result.meta:  # a Sudoku board: restored on resume, its label derived again
                    step["meta_board"] = np.asarray(result.meta["board"]).tolist()
            step["requery"] = self.ask_vlm(result.image, options, question)
            new = step["requery"]["answer"]
            step["answer_changed"] = None if new is None else not same_answer(new, base["answer"])
            if new is None:  # no answer to judge: excluded from every score (counted), the chain goes on
                step.update(status="unscored", reason="re-query unreadable: " + "; ".join(step["requery"]["errors"])[:200])
                save()
                current = nxt
                continue
            step["judge"] = self.judge(self.clients.judge, base, step, options, question)
            if self.clients.judge2 is not None:
                step["judge2"] = self.judge(self.clients.judge2, base, step, options, question)
            step["status"] = "judged"
            save()
            current = nxt

    def _edit_verified(self, step: dict[str, Any], current: EditItem, instr: EditInstruction, exact: bool) -> tuple[Any, np.ndarray | None] | None:
        """Make the step's edit and verify it, re-made up to ``verify_retries`` times with the
        ``retry`` prompt added to the instruction's constraints. The concept's region follows the
        paper's rule: on the edited image for an addition, on the original for a change or a
        removal (an editor that reports its exact mask uses that; one that ``uses_region`` is
        handed the original's). Returns the edit and its mask, or ``None`` with the step stopped
        and ``excluded`` naming why (:data:`EXCLUSIONS`)."""
        from cbm.vlm.verify import verify_edit

        kind = edit_type(instr)
        step["edit_type"] = kind
        if not exact and self.segmenter is None and not self.cfg.score_unverified:
            return _stop(step, "unverified", "no segmenter to verify a free-form edit (segmenter: null, score_unverified: false)")
        uses_region = bool(getattr(self.editor, "uses_region", False))
        result, verdict, mask, attempt_instr = None, None, None, instr
        for attempt in range(self.cfg.verify_retries + 1):
            step["attempts"] = attempt + 1
            if attempt:
                template = self.cfg.prompts.get("retry", PROMPT_DEFAULTS["retry"])
                extra = template.format(concept=instr.concept, problem=verdict.reason if verdict is not None else "not verified")
                attempt_instr = replace(instr, constraints=" ".join(x for x in (instr.constraints.strip(), extra) if x))
                step["retry_instruction"] = asdict(attempt_instr)
            region = None
            if self.segmenter is not None and (uses_region or kind != "addition"):
                try:  # the concept's pixels on the original (before this step's edit)
                    region = _segment(self.segmenter, instr.concept, current.image)
                except ValueError as err:  # the user's segmenter failed: this chain stops, the run goes on
                    return _stop(step, "segmenter_failed", str(err))
                if kind != "addition" and not region.any():  # nothing to change or remove where the segmenter looked
                    return _stop(step, "no_mask", "the segmenter found no pixel of the concept")
            try:
                extra_args = {"region": region, "attempt": attempt} if uses_region else {}
                result = self.editor.edit(current, attempt_instr, **extra_args)
            except (EditError, ValueError) as err:  # an edit the editor cannot make (unknown part, service error, no region)
                return _stop(step, "edit_failed", f"edit failed: {err}")
            mask = result.mask
            if mask is None and self.segmenter is not None:
                step["mask_source"], step["mask_on"] = "segmenter", "edited" if kind == "addition" else "original"
                if kind == "addition":
                    try:
                        mask = _segment(self.segmenter, instr.concept, result.image)
                    except ValueError as err:
                        return _stop(step, "segmenter_failed", str(err))
                else:
                    mask = region
            if mask is None:
                verdict = None
                step["mask_source"] = "none (unverified)"
                break
            if not mask.any():
                reason = "the edit changed no pixel (part not visible)" if result.mask is not None else "the segmenter found no pixel of the concept"
                step["changed"] = _plain(result.changed)
                return _stop(step, "no_mask", reason)
            verdict = verify_edit(current.image, result.image, mask, self.verify_cfg)
            if verdict.passed or (exact and not self.cfg.gate_exact_edits):
                break
        step.update(description=result.description, changed=_plain(result.changed))
        if verdict is not None:
            step["verify"] = {"passed": verdict.passed, "in_ratio": verdict.in_ratio, "out_ratio": verdict.out_ratio, "reason": verdict.reason}
            if not verdict.passed and (self.cfg.gate_exact_edits or not exact):
                return _stop(step, "not_local", f"edit not local: {verdict.reason}")
        return result, mask

    def usage_total(self) -> dict[str, Any]:
        """The run's usage over every invocation: the ledger's earlier ones plus this one's."""
        return add_usage(getattr(self, "usage_before", {}), self.clients.usage())

    def write_ledger(self) -> None:
        write_json_atomic(Path(self.cfg.output_dir) / LEDGER, {"run": self.run_id, "usage": self.usage_total()})

    def _restore(self, item: EditItem, step: dict, png: Path) -> EditItem | None:
        """The item as left by a finished step (resume): its saved image and, for synthetic items, its
        attribute row; ``None`` (the step is redone) when the image is not the one the step wrote
        (missing, changed: its sha256 differs, or unreadable) or the row does not fit the item."""
        try:
            data = png.read_bytes()
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() != step.get("image_sha256"):
            log.warning("edct: %s is not the image this step wrote; the step is redone", png)
            return None
        try:
            image = load_image(data, self.cfg.max_image_pixels, str(png))
        except ValueError as err:
            log.warning("edct: %s; the step is redone", err)
            return None
        meta = _step_meta(item.meta, step)
        if meta is None:  # the step's attributes do not fit the item
            return None
        return EditItem(image, meta, item.kind)

    # ----------------------------------------------------------------- resume
    def _load(self, path: Path, item_id: str, image_sha: str) -> dict[str, Any] | None:
        """The item's saved record when this run can resume it, else ``None`` (the item starts
        again, with one warning saying why): unreadable, edited since written, another item's or
        of the wrong shape (:func:`~cbm.vlm.edct.records.load_record`); written by an older
        version (no digest, or no run id); made by a run with other settings (possible only when
        ``run.json`` was deleted, see :func:`~cbm.vlm.edct.records.check_run`); or made for
        another image of the item. The replies in it are also in the client's reply cache, so a
        redone item costs only its image edits."""
        if not path.exists():
            return None
        saved = load_record(path, item_id)
        if saved is None:
            return None
        if "run" not in saved:
            why = "written by an older version (no settings fingerprint)"
        elif saved["run"] != self.run_id:
            why = "made with other settings than this run's"
        elif saved.get("image_sha256") != image_sha:
            why = "made for another image of this item"
        else:
            return saved
        log.warning("edct: %s: %s; the item is redone", path, why)
        return None

    def rebuild(self, saved: dict[str, Any], item: EditItem, options: list[str]) -> dict[str, Any]:
        """The record of a resumed item rebuilt from ``saved``'s reply texts: the answers, concepts,
        chain and verdicts parsed again, answer changes and true labels derived again, the status
        derived from what is there (``done`` only when the saved one says so and its chain ran out
        or stopped). A step that no longer fits the chain, an unfinished step and what follows them
        are left out (made again)."""
        rec: dict[str, Any] = {"id": saved["id"], "status": "started"}
        if "baseline" not in saved:
            return rec
        if saved["baseline"].get("turns", 1) != self.cfg.baseline_turns:  # run.json says otherwise unless it was deleted
            log.warning("edct: item %s was asked in %s turn(s), this run asks in %s; the item is redone", saved["id"],
                        saved["baseline"].get("turns", 1), self.cfg.baseline_turns)  # fmt: skip
            return rec
        base = rec["baseline"] = _answer(saved["baseline"], options)
        if base["answer"] is None:
            return {**rec, "status": "baseline_unparsed"}
        if "concepts" not in saved:
            return rec
        rec["concepts"] = _concepts(saved["concepts"], self.cfg.k)
        concepts = rec["concepts"]["concepts"]
        if not concepts:
            return {**rec, "status": "no_concepts"}
        if "chain" not in saved:
            return rec
        rec["chain"] = _chain(saved["chain"], concepts)
        chain = [EditInstruction(**e) for e in rec["chain"]["edits"]]
        if not chain:
            return {**rec, "status": "no_chain"}
        if "steps" not in saved:
            return rec
        steps = rec["steps"] = []
        truth = self.label_of(item.meta) if self.label_of is not None else None
        for instr, old in zip(chain, saved["steps"]):
            step = self._rebuild_step(old, instr, base, item, truth, options)
            if step is None:
                break
            steps.append(step)
            if step["status"] == "stopped":
                break
        if saved["status"] == "done" and steps and (steps[-1]["status"] == "stopped" or len(steps) == len(chain)):
            rec["status"] = "done"  # else the chain is resumed (every finished step's image checked as it is read back)
        return rec

    def _rebuild_step(self, old: dict[str, Any], instr: EditInstruction, base: dict[str, Any], item: EditItem, truth: str | None,
                      options: list[str]) -> dict[str, Any] | None:  # fmt: skip
        """A finished step derived again from its replies (``None``: it is made again)."""
        if old.get("status") not in FINISHED_STEPS or old["instruction"] != asdict(instr):
            return None
        step = {**old, "concept": instr.concept, "edit_text": edit_prompt(instr)}
        if old["status"] == "stopped":
            return step
        if ("judge2" in old) != (self.clients.judge2 is not None) or old["requery"].get("turns", 1) != self.cfg.baseline_turns:
            return None
        step["requery"] = _answer(old["requery"], options)
        new = step["requery"]["answer"]
        if (old["status"] == "unscored") != (new is None):
            return None  # read otherwise now: the step is made again
        step["answer_changed"] = None if new is None else not same_answer(new, base["answer"])
        for key in ("judge", "judge2"):
            if key in old:
                step[key] = _verdict(old[key])
        for key in ("truth", "known_change"):  # derived again below, or left out
            step.pop(key, None)
        if "truth" in old and truth is not None and (old.get("meta_row") is not None or old.get("meta_board") is not None):
            meta = _step_meta(item.meta, old)
            try:
                label = self.label_of(meta) if meta is not None else None
            except Exception:  # noqa: BLE001 - attribute values that are no item's: the step is made again
                label = None
            if label is None:
                return None
            step["truth"], step["known_change"] = label, label != truth
        return step

    # ----------------------------------------------------------------- all items
    def run(self, items: list[tuple[str, EditItem]], options: list[str]) -> list[dict[str, Any]]:
        from tqdm.auto import tqdm

        out: dict[str, dict] = {}
        slugs([iid for iid, _ in items], "EDCT item ids")  # two items never share a folder
        check_run(self.cfg.output_dir, self.parts)  # a directory of a run with other settings: refused before any item
        self.usage_before = read_ledger(Path(self.cfg.output_dir), self.run_id)
        show = progress_bar_wanted(self.cfg.progress)
        with ThreadPoolExecutor(max_workers=self.cfg.workers) as pool, tqdm(total=len(items), desc="edct", disable=not show, leave=False) as bar:
            futures = {pool.submit(self.run_item, iid, it, options): iid for iid, it in items}

            def keep(fut: Future) -> None:
                out[futures[fut]] = fut.result()
                bar.update(1)
                self.write_ledger()  # after every item: a killed run loses at most what was in flight

            drain(pool, futures, keep)  # a Ctrl-C stops at once: the queued items are not started
        return [out[iid] for iid, _ in items]


def _segment(segmenter: Any, concept: str, image: Image.Image) -> np.ndarray:
    """The segmenter's mask of ``concept`` on ``image``, a ``bool [H, W]`` array; any failure of the
    (user-supplied) segmenter, or a mask of the wrong shape, is a ``ValueError``."""
    try:
        mask = np.asarray(segmenter.mask(image, concept), dtype=bool)
    except Exception as err:  # noqa: BLE001 - user code: whatever it raises stops this chain with a reason
        raise ValueError(f"segmenter failed: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}") from None
    if mask.shape != (image.height, image.width):
        raise ValueError(f"segmenter returned a mask of shape {list(mask.shape)}, expected {[image.height, image.width]}")
    return mask


def _stop(step: dict[str, Any], why: str, reason: str) -> None:
    """Stop ``step`` (the chain ends there) and mark its item excluded for ``why`` (:data:`EXCLUSIONS`)."""
    step.update(status="stopped", reason=reason, excluded=why)
    return None


def load_segmenter(spec: dict[str, Any]) -> Any:
    """The :class:`~cbm.vlm.verify.Segmenter` a ``{target: "module:Class", kwargs}`` mapping builds.
    The target is resolved and checked first (:func:`cbm.vlm.verify.resolve_segmenter`: a Segmenter
    class or a ``@segmenter_factory``; ``os:system`` and the like are refused uncalled), then its
    keyword arguments against its signature, and only then is it called."""
    from cbm.vlm.edct.config import check_segmenter
    from cbm.vlm.verify import resolve_segmenter

    check_segmenter(spec)
    target = spec.get("target")
    factory = resolve_segmenter(target)
    try:
        seg = factory(**dict(spec.get("kwargs") or {}))
    except Exception as err:  # noqa: BLE001 - the user's class: whatever it raises is one line
        raise ValueError(f"segmenter: '{target}' could not be built ({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    if not callable(getattr(seg, "mask", None)):
        raise ValueError(f"segmenter.target: '{target}' returned a {type(seg).__name__}, not a segmenter with mask(image, concept)")
    return seg
