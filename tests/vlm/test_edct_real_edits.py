"""EDCT's real edit path: the detector + SAM segmenter (OWLv2 and Grounding DINO) and the diffusers
inpainting editor on tiny random models built from their config classes and loaded back through
their real loading code; the paper's edit-type rule (an addition's region found on the edited
image, a change's or removal's on the original); a retry that changes the instruction; items whose
edit cannot be verified excluded and counted by reason; and the acceptance run: photographs with
their own questions, tiny detector + segmenter masks, the tiny inpainting editor, verification and
judging through the loopback endpoint, then ``cbm-finetune data.build=edct`` on that run, with no
original image in both training and evaluation."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from chat_stub import completion, explain_turn, image_edit_response
from PIL import Image
from test_edct import make_cfg
from test_edct_files import COLOURS, jsonl, write_photos
from werkzeug import Response

from cbm.vlm.edct.config import check_segmenter
from cbm.vlm.edct.run import run
from cbm.vlm.editors import EditInstruction, EditItem, make_editor
from cbm.vlm.editors.base import edit_type
from cbm.vlm.messages import decode_image_part

pytest.importorskip("diffusers")

SEGMENTER = "cbm.vlm.segmenters:DetectorSegmenter"


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """Tiny random OWLv2, Grounding DINO, SAM and inpainting pipeline, each saved to its directory."""
    from cbm.vlm.tiny_edit import (
        build_tiny_grounding_dino,
        build_tiny_inpainting,
        build_tiny_owlv2,
        build_tiny_sam,
    )

    root = tmp_path_factory.mktemp("tiny_edit")
    return {"owlv2": build_tiny_owlv2(root / "owlv2"), "grounding_dino": build_tiny_grounding_dino(root / "gdino"),
            "sam": build_tiny_sam(root / "sam"), "inpaint": build_tiny_inpainting(root / "inpaint")}  # fmt: skip


def photo(seed: int = 0, size: tuple[int, int] = (64, 48)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray((rng.random((size[1], size[0], 3)) * 255).astype(np.uint8))


# --------------------------------------------------------------------------- segmenter and editor
@pytest.mark.slow
@pytest.mark.parametrize("detector", ["owlv2", "grounding_dino"])
def test_detector_then_sam_masks_load_from_checkpoint_directories(tiny_models, detector):
    from cbm.vlm.segmenters import DetectorSegmenter

    seg = DetectorSegmenter(str(tiny_models[detector]), str(tiny_models["sam"]), detector=detector, box_threshold=0.0, text_threshold=0.0, max_boxes=2)
    image = photo()
    boxes = seg.boxes(image, "the red ball")
    assert boxes.shape == (2, 4) and (boxes[:, 2:] > boxes[:, :2]).all() and (boxes[:, [2]] <= 64).all() and (boxes[:, [3]] <= 48).all()
    mask = seg.mask(image, "the red ball")
    assert mask.dtype == bool and mask.shape == (48, 64)
    assert np.array_equal(mask, seg.mask(image, "the red ball"))  # deterministic
    none = DetectorSegmenter(str(tiny_models[detector]), str(tiny_models["sam"]), detector=detector, box_threshold=1.0)
    assert not none.mask(image, "the red ball").any()  # no box above the threshold: an empty mask, no SAM call


@pytest.mark.slow
def test_inpainting_editor_runs_the_tiny_pipeline_and_changes_only_the_region(tiny_models):
    editor = make_editor("diffusers_inpaint", model_path=str(tiny_models["inpaint"]), steps=2, resolution=64)
    image = photo(1, (80, 56))
    region = np.zeros((56, 80), bool)
    region[10:40, 20:60] = True
    out = editor.edit(EditItem(image), EditInstruction("the ball", change="make it blue"), region=region)
    before, after = np.asarray(image), np.asarray(out.image)
    assert out.image.size == image.size and out.mask is None
    assert (before != after).any(axis=-1)[region].mean() > 0.5 and np.array_equal(before[~region], after[~region])
    again = editor.edit(EditItem(image), EditInstruction("the ball", change="make it blue"), region=region, attempt=1)
    assert not np.array_equal(np.asarray(again.image), after)  # a retry draws another sample
    with pytest.raises(Exception, match="inpainting needs the region of 'the ball'"):
        editor.edit(EditItem(image), EditInstruction("the ball"))


def test_edit_types_follow_the_instruction_verb():
    assert edit_type(EditInstruction("hat", change="add a red hat")) == "addition"
    assert edit_type(EditInstruction("ball", change="remove the ball", how="paint background over it")) == "removal"
    assert edit_type(EditInstruction("ball", change="the ball", how="erase it")) == "removal"
    assert edit_type(EditInstruction("ball", change="make the ball blue")) == "change"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"detector_path": "@/nope", "sam_path": "@"}, "segmenter.kwargs.detector_path: no model directory at '@/nope'"),
    ({"detector_path": "@", "sam_path": "@", "detector": "yolo"}, "segmenter.kwargs.detector: unknown detector 'yolo' (choose from: owlv2, grounding_dino)"),
    ({"detector_path": "@", "sam_path": "@", "box_threshold": 2}, "segmenter.kwargs.box_threshold: must lie in [0, 1], got 2"),
    ({"detector_path": "@", "sam_path": "@", "max_boxes": 0}, "segmenter.kwargs.max_boxes: must lie in [1, 100], got 0"),
])  # fmt: skip
def test_segmenter_settings_are_checked_with_the_config(tmp_path, kwargs, message):
    kwargs = {k: v.replace("@", str(tmp_path)) if isinstance(v, str) else v for k, v in kwargs.items()}
    with pytest.raises(ValueError, match=re.escape(message.replace("@", str(tmp_path)))) as err:
        check_segmenter({"target": SEGMENTER, "kwargs": kwargs})
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- rule, retry, exclusion
RULE_SEGMENTER = '''
import numpy as np
from cbm.vlm.verify import Segmenter

SEEN = []


class Centre(Segmenter):
    """The centre square (where the scene's shape is); notes the centre pixel of every image it is asked about."""
    def mask(self, image, concept):
        SEEN.append((concept, tuple(int(v) for v in np.asarray(image.convert("RGB"))[32, 32])))
        m = np.zeros((image.height, image.width), bool)
        m[20:45, 20:45] = True
        return m
'''


def test_edit_type_rule_retry_and_exclusions(tmp_path, httpserver, monkeypatch):
    """Scene 0: "add a hat" (addition: the mask is found on the edited image); scene 1: "remove the
    shape" (on the original); scene 2's editor paints the whole image first and the shape only on the
    retry, whose instruction carries the retry prompt; scene 3's edit is never local (excluded
    ``not_local`` after the retry); with no segmenter a free-form edit is excluded ``unverified``."""
    rows = write_photos(tmp_path / "photos")
    plan = {0: "add a hat on the shape", 1: "remove the shape", 2: "make the shape white", 3: "make the shape black"}
    items = [{"id": f"p{i}", "image": rows[i]["file"], "question": f"Scene {i}: what colour is the shape?", "options": list(COLOURS),
              "answer": rows[i]["colour"]} for i in plan]  # fmt: skip
    path = jsonl(tmp_path / "photos" / "items.jsonl", items)
    edits: list[str] = []

    def chat(req):
        msgs = json.loads(req.data)["messages"]
        if explain_turn(msgs):
            return completion("<explanation>The shape's colour decides it.</explanation>")
        user = msgs[-1]["content"]
        text = next(p["text"] for p in user if p["type"] == "text")
        if any(p["type"] == "image_url" for p in user):
            px = np.asarray(decode_image_part(next(p for p in user if p["type"] == "image_url")).convert("RGB"))[32, 32].astype(int)
            colour = next((c for c, v in COLOURS.items() if np.abs(px - v).max() < 40), "red")
            return completion(f"<answer>{colour}</answer><explanation>The shape is {colour}.</explanation>")
        scene = int(re.search(r"Scene (\d)", text).group(1))
        if "List up to" in text:
            return completion("<concept>the shape</concept>")
        if "chronological chain" in text:
            return completion(f"<edit><concept>the shape</concept><change>{plan[scene]}</change><how>paint it</how></edit>")
        return completion("<ac>yes</ac><ef>yes</ef><score>4</score>")

    def edit(req):
        prompt = req.form["prompt"]
        edits.append(prompt)
        img = np.asarray(Image.open(io.BytesIO(req.files["image"].read())).convert("RGB")).copy()
        if "black" in prompt or ("white" in prompt and "rejected" not in prompt):  # scene 3 always, scene 2 before its retry
            img[:] = 255 - img  # the whole image: not local
        else:
            img[20:45, 20:45] = (255, 255, 255)
        return image_edit_response(img)

    httpserver.expect_request("/v1/images/edits", method="POST").respond_with_handler(edit)
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(chat)
    (tmp_path / "rule_seg.py").write_text(RULE_SEGMENTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    import rule_seg

    editor = {"kind": "hosted", "model": "edit-model", "base_url": httpserver.url_for("/v1")}
    out = run(make_cfg(tmp_path, httpserver, items={"source": "files", "path": str(path), "n": 4}, data={"name": "robot"}, editor=editor,
                       segmenter={"target": "rule_seg:Centre"}, k=1, workers=1))  # fmt: skip
    steps = {r["id"]: r["steps"][0] for r in out["records"]}
    assert [steps[f"file-p{i}"]["edit_type"] for i in plan] == ["addition", "removal", "change", "change"]
    assert steps["file-p0"]["mask_on"] == "edited" and steps["file-p1"]["mask_on"] == "original"
    # the addition's mask was asked of the edited image (a white centre), the removal's of the original (its colour)
    white = (255, 255, 255)
    assert rule_seg.SEEN[0][1] == white and rule_seg.SEEN[1][1] != white
    assert steps["file-p2"]["attempts"] == 2 and steps["file-p2"]["status"] == "judged"
    assert "the previous edit was rejected (too much change outside the mask" in steps["file-p2"]["retry_instruction"]["constraints"]
    assert (steps["file-p3"]["status"], steps["file-p3"]["excluded"], steps["file-p3"]["attempts"]) == ("stopped", "not_local", 2)
    s, res = out["summary"], out["result"]
    assert (s["items"], s["items_scored"], res["excluded"]) == (4, 3, {"not_local": 1})
    assert "items excluded, never scored (an edit not verified): not_local 1" in (tmp_path / "run" / "results.md").read_text()
    assert len(edits) == 6  # one edit each, a retry for scenes 2 and 3
    bare = run(make_cfg(tmp_path, httpserver, out="bare", items={"source": "files", "path": str(path), "n": 4}, data={"name": "robot"},
                        editor=editor, k=1))  # fmt: skip
    assert bare["result"]["excluded"] == {"unverified": 4} and bare["summary"]["items_scored"] == 0 and len(edits) == 6  # nothing edited


# --------------------------------------------------------------------------- acceptance run
@pytest.mark.slow
def test_photographs_with_tiny_detector_sam_and_inpainting_then_finetune(tiny_models, tmp_path, httpserver):
    """Six photographs, each with its own question; the tiny OWLv2 + SAM find "the shape" (random
    boxes, seeded weights), the tiny inpainting pipeline edits that region (2 steps), the verifier
    measures it on the original (a change), the scripted VLM and judge answer through the loopback
    endpoint. What is asserted is exact whatever the random boxes: every item is scored or excluded
    by a named reason, every judged step passed verification, and the fine-tuning set built from the
    run holds only verified, judged steps, split with no original image on both sides."""
    from cbm.vlm.finetune.config import FinetuneConfig
    from cbm.vlm.finetune.run import run as finetune
    from cbm.vlm.tiny import TinyVLMConfig, build_tiny_vlm

    rows = write_photos(tmp_path / "photos")
    items = [{"id": f"p{i}", "image": r["file"], "question": f"What colour is the {r['shape']}?", "options": list(COLOURS), "answer": r["colour"]}
             for i, r in enumerate(rows)]  # fmt: skip
    path = jsonl(tmp_path / "photos" / "items.jsonl", items)

    def chat(req):
        msgs = json.loads(req.data)["messages"]
        if explain_turn(msgs):
            return completion("<explanation>The centre's colour decides it.</explanation>")
        user = msgs[-1]["content"]
        text = next(p["text"] for p in user if p["type"] == "text")
        image = next((p for p in user if p["type"] == "image_url"), None)
        if image is not None:
            px = np.asarray(decode_image_part(image).convert("RGB"))[32, 32].astype(int)
            colour = next((c for c, v in COLOURS.items() if np.abs(px - v).max() < 40), "red")
            return completion(f"<answer>{colour}</answer><explanation>The centre is {colour}.</explanation>")
        if "List up to" in text:
            return completion("<concept>the shape</concept>")
        if "chronological chain" in text:
            return completion("<edit><concept>the shape</concept><change>make the shape green</change><how>repaint it</how></edit>")
        if "Answer Consistency (AC)" in text:
            return completion("<ac>yes</ac><ef>yes</ef><score>5</score>")
        return Response("unexpected prompt", status=400)

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(chat)
    seg = {"target": SEGMENTER, "kwargs": {"detector_path": str(tiny_models["owlv2"]), "sam_path": str(tiny_models["sam"]), "box_threshold": 0.0}}
    editor = {"kind": "diffusers_inpaint", "model_path": str(tiny_models["inpaint"]), "steps": 2, "resolution": 64}
    out = run(make_cfg(tmp_path, httpserver, items={"source": "files", "path": str(path), "n": 6}, data={"name": "robot"}, editor=editor,
                       segmenter=seg, k=1))  # fmt: skip
    recs, s, res = out["records"], out["summary"], out["result"]
    assert [r["status"] for r in recs] == ["done"] * 6 and [r["baseline"]["answer"] for r in recs] == [r["colour"] for r in rows]
    steps = [r["steps"][0] for r in recs]
    excluded = [st for st in steps if st["status"] == "stopped"]
    assert s["items_scored"] + len(excluded) == 6 and sum(res["excluded"].values()) == len(excluded)
    assert set(res["excluded"]) <= {"edit_failed", "no_mask", "not_local"} and all(st["excluded"] for st in excluded)
    judged = [st for st in steps if st["status"] == "judged"]
    assert judged, "the seeded tiny models must verify at least one edit"
    assert all(st["verify"]["passed"] and st["mask_on"] == "original" and st["edit_type"] == "change" for st in judged)
    assert all(st["verify"]["out_ratio"] == 0.0 for st in judged)  # the editor keeps every pixel outside the region

    tiny_vlm = build_tiny_vlm(tmp_path / "vlm", TinyVLMConfig(image_px=56))
    cfg = FinetuneConfig(output_dir=str(tmp_path / "ft"), model={"path": str(tiny_vlm)},
                         data={"build": "edct", "source": {"run_dir": str(tmp_path / "run")}, "eval_fraction": 0.34},
                         lora={"r": 4}, train={"epochs": 1, "batch_size": 4}, eval={"heatmaps": 0, "before": False}, progress=False)  # fmt: skip
    ft = finetune(cfg)["result"]
    pairs = [json.loads(line) for line in (tmp_path / "ft" / "data" / "pairs.jsonl").read_text().splitlines()]
    assert len(pairs) == 2 * len(judged) and ft["train_rows"] + ft["eval_rows"] == len(pairs)
    assert {p["meta"]["edct_item"] for p in pairs} == {r["id"] for r, st in zip(recs, steps) if st["status"] == "judged"}
    assert all(p["meta"].get("label") == "judge" for p in pairs if p["split"] == "counterfactual")
    with open(tmp_path / "ft" / "per_row.csv") as f:
        held = {row["pair_id"] for row in csv.DictReader(f)}
    originals = {p["pair_id"]: p["image"] for p in pairs if p["split"] == "original"}
    trained = {img for pid, img in originals.items() if pid not in held}
    assert held and trained and trained.isdisjoint({originals[pid] for pid in held})
