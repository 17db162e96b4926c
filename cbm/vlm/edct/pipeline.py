"""The EDCT pipeline, item by item, every stage saved so a run resumes where it stopped.

For each item: the VLM's baseline answer + explanation -> the LLM extracts up to ``k`` cited
visual concepts (ranked) -> one LLM call writes the edit chain (Keep / Change / How /
Constraints, chronological) -> for each edit: the editor makes the counterfactual from the
previous step's image, the verifier checks the edit is local (one retry), the VLM answers again,
the judge scores Answer Consistency, Explanation Faithfulness and a 1-5 rubric. With the
synthetic editors the true label of every counterfactual is known (``known_change``).

Layout of ``output_dir``: ``items/<id>/record.json`` (every stage's parsed output, replies,
errors, status), ``items/<id>/original.png``, ``items/<id>/step<i>.png`` / ``step<i>_mask.png``, and the run's
``results.json`` / ``results.md`` / ``usage.json``. Replies are also in the client's disk cache.
"""

from __future__ import annotations

import hashlib
import io
import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from cbm.config.safe_paths import inside, slug, slugs
from cbm.progress import progress_bar_wanted
from cbm.vlm.client import ChatClient
from cbm.vlm.config import ClientConfig
from cbm.vlm.edct.config import EDCTConfig
from cbm.vlm.edct.parse import parse_answer, parse_concepts, parse_edit_chain, parse_verdict
from cbm.vlm.editors.base import EditError, EditInstruction, EditItem, edit_prompt
from cbm.vlm.images import load_image
from cbm.vlm.reply import ChatError
from cbm.vlm.sealed import read_json, seal, unseal
from cbm.vlm.typed import conforms
from synthetic.atomic import atomic_write, write_json_atomic

log = logging.getLogger("cbm.vlm")

#: Item statuses a rerun keeps (``done`` = chain finished); ``error`` (the endpoint failed after its
#: retries) is picked up again where it stopped.
TERMINAL = ("done", "baseline_unparsed", "no_concepts", "no_chain")


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
        seen, out = set(), {}
        for role in ("vlm", "llm", "judge", "judge2"):
            c = getattr(self, role)
            if c is not None and id(c) not in seen:
                seen.add(id(c))
                out[role] = {"model": c.model, **c.usage.to_json()}
        return out


def _png(path: Path, image: Image.Image) -> str:
    """Write ``image`` as PNG (atomic); the sha256 of the bytes written (kept in the record, so a
    resumed run reads back only the image it wrote)."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    data = buf.getvalue()
    atomic_write(path, lambda f: f.write(data))
    return hashlib.sha256(data).hexdigest()


class Pipeline:
    def __init__(self, cfg: EDCTConfig, clients: Clients, editor: Any, label_of: Any | None = None):
        self.cfg = cfg
        self.clients = clients
        self.editor = editor
        self.label_of = label_of  # meta -> true class name (synthetic items), else None
        self.root = Path(cfg.output_dir) / "items"
        from cbm.vlm.verify import VerifyConfig

        self.verify_cfg = VerifyConfig(**dict(cfg.verify))
        self.segmenter = load_segmenter(cfg.segmenter) if cfg.segmenter is not None else None

    # ----------------------------------------------------------------- stages
    def _prompt(self, name: str, **fields: Any) -> str:
        return self.cfg.prompts[name].format(**fields)

    def ask_vlm(self, image: Image.Image, options: list[str]) -> dict[str, Any]:
        """The VLM's answer and explanation for ``image`` (generated, or option-scored then explained)."""
        vlm = self.clients.vlm
        msgs = vlm.messages(self._prompt("answer", question=self.cfg.question, options=", ".join(options)), [image])
        if self.cfg.answer_by == "score":
            scores = vlm.score(msgs, "<answer>", options)
            answer = options[int(np.argmax(scores))]
            reply = vlm.chat(msgs, prefix=f"<answer>{answer}</answer>\n<explanation>").text
            if "</explanation>" not in reply:
                reply += "</explanation>"
            parsed = parse_answer(reply, options)
            return {"answer": parsed.answer, "explanation": parsed.explanation, "scores": scores, "reply": reply,
                    "errors": [str(e) for e in parsed.errors]}  # fmt: skip
        reply = vlm.chat(msgs).text
        parsed = parse_answer(reply, options)
        return {"answer": parsed.answer, "explanation": parsed.explanation, "reply": reply, "errors": [str(e) for e in parsed.errors]}

    def judge(self, client: ChatClient, base: dict, step: dict, options: list[str]) -> dict[str, Any]:
        prompt = self._prompt("judge", question=self.cfg.question, options=", ".join(options), answer=base["answer"],
                              explanation=base["explanation"] or "", edit=step["edit_text"],
                              new_answer=step["requery"]["answer"] or "(no answer)", new_explanation=step["requery"]["explanation"] or "")  # fmt: skip
        reply = client.chat(client.messages(prompt)).text
        v = parse_verdict(reply)
        return {"ac": v.ac, "ef": v.ef, "score": v.score, "reply": reply, "errors": [str(e) for e in v.errors]}

    # ----------------------------------------------------------------- one item
    def run_item(self, item_id: str, item: EditItem, options: list[str]) -> dict[str, Any]:
        d = inside(self.root, self.root / slug(item_id), "EDCT item id")  # ids may come from data: slugged
        path = d / "record.json"
        rec = _load(path, item_id) or {"id": item_id, "status": "started"}
        rec["question"] = self.cfg.question
        if self.label_of is not None:
            rec["truth"] = self.label_of(item.meta)
        if not (d / "original.png").is_file():
            _png(d / "original.png", item.image)

        def save() -> None:
            write_json_atomic(path, seal(rec))

        if rec["status"] in TERMINAL:
            return rec
        rec.pop("error", None)
        try:
            if "baseline" not in rec:
                rec["baseline"] = self.ask_vlm(item.image, options)
                save()
            base = rec["baseline"]
            if base["answer"] is None:
                rec["status"] = "baseline_unparsed"
                save()
                return rec
            if "concepts" not in rec:
                reply = self.clients.llm.chat(self.clients.llm.messages(self._prompt(
                    "extract", question=self.cfg.question, options=", ".join(options), answer=base["answer"],
                    explanation=base["explanation"] or "", k=self.cfg.k))).text  # fmt: skip
                concepts, errors = parse_concepts(reply, self.cfg.k)
                rec["concepts"] = {"concepts": concepts, "reply": reply, "errors": [str(e) for e in errors]}
                save()
            concepts = rec["concepts"]["concepts"]
            if not concepts:
                rec["status"] = "no_concepts"
                save()
                return rec
            if "chain" not in rec:
                listing = "\n".join(f"{i + 1}. {c}" for i, c in enumerate(concepts))
                reply = self.clients.llm.chat(self.clients.llm.messages(self._prompt(
                    "chain", question=self.cfg.question, answer=base["answer"], explanation=base["explanation"] or "",
                    concepts=listing, n=len(concepts)))).text  # fmt: skip
                chain, errors = parse_edit_chain(reply, concepts)
                rec["chain"] = {"edits": [asdict(e) for e in chain], "reply": reply, "errors": [str(e) for e in errors]}
                save()
            chain = [EditInstruction(**e) for e in rec["chain"]["edits"]]
            if not chain:
                rec["status"] = "no_chain"
                save()
                return rec
            self._run_chain(rec, d, item, chain, options, save)
            rec["status"] = "done"
        except ChatError as err:  # the endpoint failed after its retries: recorded, the run goes on
            rec["status"], rec["error"] = "error", f"{err.kind}: {err}"
        save()
        return rec

    def _run_chain(self, rec: dict, d: Path, item: EditItem, chain: list[EditInstruction], options: list[str], save: Any) -> None:
        from cbm.vlm.verify import verify_edit

        steps: list[dict[str, Any]] = rec.setdefault("steps", [])
        exact = bool(getattr(self.editor, "exact", False))  # the editor's masks are the true changed pixels
        current = item
        base = rec["baseline"]
        for i, instr in enumerate(chain):
            if i < len(steps) and steps[i].get("status") in ("judged", "stopped"):
                if steps[i]["status"] == "stopped":
                    return
                restored = self._restore(item, steps[i], d / f"step{i + 1}.png")
                if restored is not None:
                    current = restored
                    continue  # else the step is made again
            step: dict[str, Any] = {"index": i + 1, "concept": instr.concept, "instruction": asdict(instr), "edit_text": edit_prompt(instr)}
            del steps[i:]
            steps.append(step)
            result, verdict, attempts = None, None, 0
            for attempt in range(self.cfg.verify_retries + 1):
                attempts = attempt + 1
                try:
                    result = self.editor.edit(current, instr)
                except (EditError, ValueError) as err:  # an edit the editor cannot make (unknown part, service error)
                    step.update(status="stopped", reason=f"edit failed: {err}")
                    save()
                    return
                mask = result.mask
                if mask is None and self.segmenter is not None:  # the concept's pixels before and after the edit
                    step["mask_source"] = "segmenter"
                    try:
                        mask = _segment(self.segmenter, instr.concept, current.image, result.image)
                    except ValueError as err:  # the user's segmenter failed: this chain stops, the run goes on
                        step.update(status="stopped", reason=str(err))
                        save()
                        return
                if mask is None:
                    verdict = None
                    step["mask_source"] = "none (unverified)"
                    break
                if not mask.any():
                    reason = "the edit changed no pixel (part not visible)" if result.mask is not None else "the segmenter found no pixel of the concept"
                    step.update(status="stopped", reason=reason, changed=_plain(result.changed))
                    save()
                    return
                verdict = verify_edit(current.image, result.image, mask, self.verify_cfg)
                if verdict.passed or (exact and not self.cfg.gate_exact_edits):
                    break
            step.update(description=result.description, changed=_plain(result.changed), attempts=attempts)
            if verdict is not None:
                step["verify"] = {"passed": verdict.passed, "in_ratio": verdict.in_ratio, "out_ratio": verdict.out_ratio, "reason": verdict.reason}
                if not verdict.passed and (self.cfg.gate_exact_edits or not exact):
                    step.update(status="stopped", reason=f"edit not local: {verdict.reason}")
                    save()
                    return
            step["image_sha256"] = _png(d / f"step{i + 1}.png", result.image)
            if mask is not None:
                _png(d / f"step{i + 1}_mask.png", Image.fromarray(mask.astype(np.uint8) * 255))
            nxt = EditItem(result.image, result.meta if result.meta is not None else current.meta, current.kind)
            if self.label_of is not None and result.meta is not None:
                step["truth"] = self.label_of(result.meta)
                step["known_change"] = step["truth"] != rec["truth"]
                step["meta_row"] = np.asarray(result.meta["row"]).tolist() if isinstance(result.meta, dict) and "row" in result.meta else None
            step["requery"] = self.ask_vlm(result.image, options)
            new = step["requery"]["answer"]
            step["answer_changed"] = None if new is None else new != base["answer"]
            step["judge"] = self.judge(self.clients.judge, base, step, options)
            if self.clients.judge2 is not None:
                step["judge2"] = self.judge(self.clients.judge2, base, step, options)
            step["status"] = "judged"
            save()
            current = nxt

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
        meta = item.meta
        if isinstance(meta, dict) and step.get("meta_row") is not None:
            row = np.asarray(step["meta_row"], dtype=np.int64)
            if "row" in meta and row.shape != np.shape(meta["row"]):
                return None
            meta = {**meta, "row": row}
        return EditItem(image, meta, item.kind)

    # ----------------------------------------------------------------- all items
    def run(self, items: list[tuple[str, EditItem]], options: list[str]) -> list[dict[str, Any]]:
        from tqdm.auto import tqdm

        out: dict[str, dict] = {}
        slugs([iid for iid, _ in items], "EDCT item ids")  # two items never share a folder
        show = progress_bar_wanted(self.cfg.progress)
        with ThreadPoolExecutor(max_workers=self.cfg.workers) as pool, tqdm(total=len(items), desc="edct", disable=not show, leave=False) as bar:
            futures = {pool.submit(self.run_item, iid, it, options): iid for iid, it in items}
            for fut in as_completed(futures):
                out[futures[fut]] = fut.result()
                bar.update(1)
        return [out[iid] for iid, _ in items]


def _segment(segmenter: Any, concept: str, before: Image.Image, after: Image.Image) -> np.ndarray:
    """The segmenter's mask of ``concept`` before and after an edit, a ``bool [H, W]`` array; any
    failure of the (user-supplied) segmenter, or a mask of the wrong shape, is a ``ValueError``."""
    from cbm.vlm.verify import segmenter_mask

    try:
        mask = np.asarray(segmenter_mask(segmenter, concept)(before, after), dtype=bool)
    except Exception as err:  # noqa: BLE001 - user code: whatever it raises stops this chain with a reason
        raise ValueError(f"segmenter failed: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}") from None
    if mask.shape != (before.height, before.width):
        raise ValueError(f"segmenter returned a mask of shape {list(mask.shape)}, expected {[before.height, before.width]}")
    return mask


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


def status_counts(records: list[dict[str, Any]]) -> dict[str, int]:
    steps = Counter(s.get("status", "?") for r in records for s in r.get("steps", []))
    return {**{f"item_{k}": v for k, v in Counter(r["status"] for r in records).items()}, **{f"step_{k}": v for k, v in steps.items()}}


def parse_error_counts(records: list[dict[str, Any]]) -> dict[str, int]:
    """Parse errors per stage and kind (``baseline/missing``: 3 ...)."""
    c: Counter = Counter()
    for r in records:
        for stage in ("baseline", "concepts", "chain"):
            for e in (r.get(stage) or {}).get("errors", []):
                c[f"{stage}/{e.split(':')[0]}"] += 1
        for s in r.get("steps", []):
            for stage in ("requery", "judge", "judge2"):
                for e in (s.get(stage) or {}).get("errors", []):
                    c[f"{stage}/{e.split(':')[0]}"] += 1
    return dict(sorted(c.items()))


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return obj


#: What the pipeline reads back from a saved record (extra keys are kept; values of these keys must fit).
ERRORS = [str]
ANSWER = {"answer": (str, None), "explanation": (str, None), "reply": str, "errors": ERRORS, "?scores": [float]}
VERDICT = {"ac": (bool, None), "ef": (bool, None), "score": (int, None), "reply": str, "errors": ERRORS}
EDIT = {"concept": str, "keep": str, "change": str, "how": str, "constraints": str, "target": (str, None)}
STEP = {"index": int, "concept": str, "instruction": EDIT, "edit_text": str, "?status": str, "?requery": ANSWER,
        "?judge": VERDICT, "?judge2": VERDICT, "?answer_changed": (bool, None), "?known_change": bool, "?truth": str,
        "?meta_row": ([int], None), "?image_sha256": str,
        "?verify": {"passed": bool, "in_ratio": float, "out_ratio": float, "reason": str}}  # fmt: skip
JUDGED_STEP = {**STEP, "requery": ANSWER, "judge": VERDICT, "answer_changed": (bool, None)}
RECORD = {"id": str, "status": str, "?error": str, "?truth": str, "?baseline": ANSWER,
          "?concepts": {"concepts": [str], "reply": str, "errors": ERRORS},
          "?chain": {"edits": [EDIT], "reply": str, "errors": ERRORS}, "?steps": [STEP]}  # fmt: skip


def valid_record(rec: Any, item_id: str) -> bool:
    """Whether a record read back is this item's and has the shape every stage reads (so even a
    record whose digest was recomputed cannot feed a wrong type to the pipeline or the tables)."""
    if not conforms(rec, RECORD) or rec["id"] != item_id:
        return False
    if any(set(e) != set(EDIT) for e in rec.get("chain", {}).get("edits", [])):
        return False
    return all(conforms(s, JUDGED_STEP) for s in rec.get("steps", []) if s.get("status") == "judged")


def _load(path: Path, item_id: str) -> dict[str, Any] | None:
    """The item's saved record, or ``None`` (the item starts again).

    A record is a resume point: the replies in it are also in the client's reply cache, so a
    record that cannot be trusted (unreadable, edited since written: its sha256 differs, another
    item's, of the wrong shape) is treated as missing, with a warning, and the item is redone
    rather than the run refused (only image edits are made again)."""
    if not path.exists():
        return None
    try:
        rec = unseal(read_json(path))
    except ValueError as err:
        log.warning("edct: %s; the item is redone", err)
        return None
    if rec is None or not valid_record(rec, item_id):
        log.warning("edct: %s changed since it was written or is not this item's record; the item is redone", path)
        return None
    return rec
