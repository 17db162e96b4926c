"""EDCT on photographs read from files: JSONL (generic, OK-VQA-, DriveLM- and 3DSRBench-shaped
rows), an image folder with or without its ``metadata.jsonl``, and a saved ``datasets`` dataset;
each item with its own question, options and truth; bad files and rows refused in one line; and a
whole run on photographs (PIL scenes of coloured shapes the test draws) with the hosted editor and a
segmenter through the loopback endpoint."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from chat_stub import completion, explain_turn, first_image, image_edit_response
from PIL import Image, ImageDraw
from test_edct import SEGMENTER, make_cfg
from werkzeug import Response

from cbm.vlm.edct.config import EDCTConfig
from cbm.vlm.edct.items import ItemsError, read_items
from cbm.vlm.edct.run import run
from cbm.vlm.messages import decode_image_part

COLOURS = {"red": (220, 30, 30), "blue": (30, 60, 220), "green": (30, 170, 60)}
SHAPES = ("circle", "square")


def scene(colour: str, shape: str, seed: int) -> Image.Image:
    """A 64 px photograph-like scene: a noisy grey-green background and one coloured shape."""
    rng = np.random.default_rng(seed)
    bg = (rng.normal(0, 12, (64, 64, 3)) + np.array([150, 160, 140])).clip(0, 255).astype(np.uint8)
    im = Image.fromarray(bg)
    d = ImageDraw.Draw(im)
    box = (20, 20, 44, 44)
    (d.ellipse if shape == "circle" else d.rectangle)(box, fill=COLOURS[colour])
    return im


def write_photos(root: Path) -> list[dict]:
    """Six scenes as PNG / JPEG files; their rows (file, colour, shape)."""
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (colour, shape) in enumerate([(c, s) for c in COLOURS for s in SHAPES]):
        name = f"scene{i}.{'png' if i % 2 == 0 else 'jpg'}"
        scene(colour, shape, i).save(root / name)
        rows.append({"file": name, "colour": colour, "shape": shape})
    return rows


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_every_format_and_shape_reads_its_rows(tmp_path):
    rows = write_photos(tmp_path / "photos")
    generic = jsonl(tmp_path / "photos" / "items.jsonl", [
        {"id": f"g{i}", "image": r["file"], "question": f"What colour is the {r['shape']}?", "options": list(COLOURS), "answer": r["colour"]}
        for i, r in enumerate(rows)])  # fmt: skip
    got = read_items(generic)
    assert [it.id for it in got] == [f"g{i}" for i in range(6)] and got[2].question == "What colour is the circle?"
    assert got[2].options == ["red", "blue", "green"] and got[2].truth == "blue" and got[2].image == tmp_path / "photos" / "scene2.png"
    okvqa = jsonl(tmp_path / "photos" / "okvqa.jsonl", [{"question_id": 7, "image_path": "scene0.png", "question": "What is shown?",
                                                         "answers": [{"answer": "ball"}, {"answer": "Circle"}, {"answer": "circle"}]}])  # fmt: skip
    (ok,) = read_items(okvqa, shape="okvqa")
    assert (ok.id, ok.options, ok.truth) == ("7", None, "circle")
    drive = jsonl(tmp_path / "photos" / "drive.jsonl", [{"image_paths": {"CAM_FRONT": "scene1.jpg"}, "Q": "Is it safe?", "A": "Yes."}])
    (dr,) = read_items(drive, shape="drivelm")
    assert dr.image.name == "scene1.jpg" and (dr.question, dr.options, dr.truth) == ("Is it safe?", None, "Yes.")
    spatial = jsonl(tmp_path / "photos" / "3d.jsonl", [{"index": "q1", "image_url": "scene3.jpg", "question": "Where is the shape?",
                                                        "A": "left", "B": "centre", "C": "right", "answer": "B"}])  # fmt: skip
    (sp,) = read_items(spatial, shape="3dsrbench")
    assert (sp.options, sp.truth) == (["left", "centre", "right"], "centre")
    bare = read_items(tmp_path / "photos", fmt="folder")  # no sidecar: every image, the run's question
    assert [it.id for it in bare] == [f"scene{i}" for i in range(6)] and bare[0].question is None
    jsonl(tmp_path / "photos" / "metadata.jsonl", [{"file_name": r["file"], "question": "Which shape?", "options": list(SHAPES), "answer": r["shape"]}
                                                    for r in rows])  # fmt: skip
    meta = read_items(tmp_path / "photos")  # auto: a folder with its sidecar
    assert [it.truth for it in meta] == [r["shape"] for r in rows] and meta[0].question == "Which shape?"
    import datasets

    ds = datasets.Dataset.from_dict({"image": [str(tmp_path / "photos" / r["file"]) for r in rows], "question": ["Colour?"] * 6,
                                     "options": [list(COLOURS)] * 6, "answer": [r["colour"] for r in rows]}).cast_column("image", datasets.Image())  # fmt: skip
    ds.save_to_disk(str(tmp_path / "hf"))
    hf = read_items(tmp_path / "hf")
    assert len(hf) == 6 and isinstance(hf[0].image, Image.Image) and [it.truth for it in hf] == [r["colour"] for r in rows]
    assert np.array_equal(np.asarray(hf[1].image.convert("RGB")), np.asarray(Image.open(tmp_path / "photos" / "scene1.jpg").convert("RGB")))


@pytest.mark.parametrize("row,message", [
    ({"image": "../outside.png", "question": "q"}, "leads outside"),
    ({"image": "/etc/hostname", "question": "q"}, "leads outside"),
    ({"image": "https://example.com/x.png", "question": "q"}, "is a URL; download it"),
    ({"question": "q"}, "no image"),
    ({"image": "scene0.png", "options": ["a"]}, "options must be a list of at least two answers"),
    ({"image": "scene0.png", "options": ["a", "A"]}, "options must be distinct"),
    ({"image": "scene0.png", "options": ["a", "b"], "answer": "c"}, "answer 'c' is not one of the options"),
    ({"image": "scene0.png", "question": {"text": "q"}}, "question must be a string, got dict"),
])  # fmt: skip
def test_bad_rows_are_one_line(tmp_path, row, message):
    write_photos(tmp_path / "photos")
    path = jsonl(tmp_path / "photos" / "bad.jsonl", [{"image": "scene1.jpg"}, row])
    with pytest.raises(ItemsError, match=re.escape(message)) as err:
        read_items(path)
    assert "bad.jsonl:2" in str(err.value) and "\n" not in str(err.value)


def test_bad_files_are_one_line(tmp_path):
    write_photos(tmp_path / "photos")
    (tmp_path / "photos" / "broken.jsonl").write_text('{"image": "scene0.png"}\n{not json\n')
    with pytest.raises(ItemsError, match=r"broken.jsonl:2: not JSON"):
        read_items(tmp_path / "photos" / "broken.jsonl")
    jsonl(tmp_path / "photos" / "dup.jsonl", [{"id": "a", "image": "scene0.png"}, {"id": "a", "image": "scene1.jpg"}])
    with pytest.raises(ItemsError, match="item id 'a' given twice"):
        read_items(tmp_path / "photos" / "dup.jsonl")
    with pytest.raises(ItemsError, match="nothing at"):
        read_items(tmp_path / "missing.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ItemsError, match="no items in"):
        read_items(tmp_path / "empty")
    with pytest.raises(ValueError, match="items.source=files needs the data's path"):
        EDCTConfig(output_dir=str(tmp_path / "o"), vlm={"model": "m"}, llm={"model": "m"}, judge={"model": "m"}, prompts={},
                   items={"source": "files"})  # fmt: skip


def test_edct_on_photographs_with_their_own_questions(tmp_path, httpserver, monkeypatch):
    """Each photograph asks its own question with its own options; the scripted VLM reads the colour
    of the centre pixel (or the shape's fill for open-ended questions); the hosted editor paints
    the shape's box white (removing it); the judge is scripted. Every item is scored and every
    baseline answer is the row's truth."""
    rows = write_photos(tmp_path / "photos")
    items = [{"id": f"p{i}", "image": r["file"], "question": f"What colour is the {r['shape']} in this photo?",
              "options": list(COLOURS), "answer": r["colour"]} for i, r in enumerate(rows)]  # fmt: skip
    items[5] = {"id": "p5", "image": rows[5]["file"], "question": "Describe the object in two words."}  # open-ended, no truth
    path = jsonl(tmp_path / "photos" / "items.jsonl", items)
    asked: dict[str, str] = {}

    def colour_of(img: Image.Image) -> str | None:
        px = np.asarray(img.convert("RGB"))[32, 32].astype(int)
        return next((c for c, v in COLOURS.items() if np.abs(px - v).max() < 40), None)

    def chat(req):
        msgs = json.loads(req.data)["messages"]
        if explain_turn(msgs):
            colour = colour_of(decode_image_part(first_image(msgs)))
            return completion(f"<explanation>The centre of the shape is {colour}.</explanation>")
        user = msgs[-1]["content"]
        text = next(p["text"] for p in user if p["type"] == "text")
        image = next((p for p in user if p["type"] == "image_url"), None)
        if image is not None:
            question = text.split("\n")[0]
            colour = colour_of(decode_image_part(image))
            asked.setdefault(question, colour or "none")
            if "two words" in question:
                return completion(f"<answer>{'a ' + colour + ' shape' if colour else 'empty background'}</answer><explanation>The shape in the centre.</explanation>")
            return completion(f"<answer>{colour or 'red'}</answer><explanation>The centre of the shape is {colour}.</explanation>")
        if "List up to" in text:
            return completion("<concept>the shape</concept>")
        if "chronological chain" in text:
            return completion("<edit><concept>the shape</concept><change>remove it</change><how>paint over it</how></edit>")
        if "Answer Consistency (AC)" in text:
            changed = re.search(r"Original answer: (.+)", text).group(1) != re.search(r"Answer after the edit: (.+)", text).group(1)
            return completion(f"<ac>{'yes' if changed else 'no'}</ac><ef>yes</ef><score>{4 if changed else 2}</score>")
        return Response("unexpected prompt", status=400)

    def edit(req):
        img = np.asarray(Image.open(io.BytesIO(req.files["image"].read())).convert("RGB")).copy()
        img[20:45, 20:45] = (255, 255, 255)
        return image_edit_response(img)

    httpserver.expect_request("/v1/images/edits", method="POST").respond_with_handler(edit)
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(chat)
    (tmp_path / "box_seg.py").write_text(SEGMENTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    editor = {"kind": "hosted", "model": "edit-model", "base_url": httpserver.url_for("/v1")}
    out = run(make_cfg(tmp_path, httpserver, items={"source": "files", "path": str(path), "n": 6}, data={"name": "robot"}, editor=editor,
                       segmenter={"target": "box_seg:Square", "kwargs": {"y0": 20, "x0": 20, "size": 25}}, k=1))  # fmt: skip
    recs = out["records"]
    assert [r["status"] for r in recs] == ["done"] * 6 and out["summary"]["items_scored"] == 6
    assert [r["question"] for r in recs] == [it["question"] for it in items]  # each item asked its own question
    assert [r["baseline"]["answer"] for r in recs[:5]] == [r["colour"] for r in rows[:5]] == [r["truth"] for r in recs[:5]]
    assert recs[5]["options"] == [] and recs[5]["baseline"]["answer"] == "a green shape" and recs[5]["truth"] is None
    steps = [r["steps"][0] for r in recs]
    assert all(s["verify"]["passed"] for s in steps)
    # the shape is gone: the answer moves unless the VLM's guess for an empty scene ("red") was the answer
    assert [s["answer_changed"] for s in steps] == [r["colour"] != "red" for r in rows[:5]] + [True]
    assert out["summary"]["ccs"].value == pytest.approx(4 / 6)
    assert set(asked) == {it["question"] for it in items}
