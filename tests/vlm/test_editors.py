"""EDCT image editors: exact robot / Sudoku re-renders with exact masks, hosted editor against a
loopback server, the missing-diffusers message and the factory."""

from __future__ import annotations

import base64
import io
import sys

import numpy as np
import pytest
from PIL import Image

from cbm.vlm.editors import (
    ROBOT_PARTS,
    DiffusersEditor,
    EditError,
    EditInstruction,
    EditItem,
    Editor,
    EditResult,
    HostedImageEditor,
    MissingDependencyError,
    RobotEditor,
    SudokuEditor,
    make_editor,
    parse_cell,
    resolve_robot_part,
    robot_items,
    sudoku_items,
)
from synthetic.robot import RobotConfig, generate, part_mask
from synthetic.robot.attributes import META_INDEX
from synthetic.sudoku import SudokuConfig, cell_box
from synthetic.sudoku import generate as sudoku_generate

SIZE = 64


def robot_cfg(**kw) -> RobotConfig:
    base = {"image_size": SIZE, "n_train": 2, "val_fraction": 0.0, "n_calib": 0, "n_test": 6}
    return RobotConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def robots():
    cfg = robot_cfg()
    data = generate(cfg)
    return cfg, data, robot_items(cfg, "test", data=data)


#: Every rendering knob of the generator at once: blur, occlusion, faint part, pixel noise.
NUISANCE = {"blur": 0.6, "occlude": ["hands"], "visibility": {"knees": 0.3}, "pixel_noise": 9.0}


@pytest.fixture(scope="module")
def noisy_robots():
    cfg = robot_cfg(**NUISANCE)
    data = generate(cfg)
    return cfg, data, robot_items(cfg, "test", [1, 5], data=data)


# --------------------------------------------------------------------------- robots
def test_unedited_rows_rerender_byte_identically(robots, noisy_robots):
    for cfg, data, items in (robots, noisy_robots):
        editor = RobotEditor(cfg)
        test_rows = data.indices("test")
        for item in items:
            assert item.kind == "robot" and item.meta["index"] == test_rows[item.meta["position"]]
            again = editor.render_item(item.meta)
            assert again.dtype == np.uint8 and again.tobytes() == data.x[item.meta["index"]].tobytes()
    assert noisy_robots[2][0].meta["noise"].shape == (SIZE, SIZE, 3)


def test_feet_edit_changes_only_the_feet_region(robots):
    cfg, _, items = robots
    item = items[0]
    result = RobotEditor(cfg).edit(item, EditInstruction(concept="feet", change="other feet"))
    before, after = item.array, np.asarray(result.image)
    assert result.mask.dtype == bool and result.mask.shape == (SIZE, SIZE) and result.mask.any()
    # the mask is exactly the changed pixels, and they lie inside the feet's region (any sub-type)
    np.testing.assert_array_equal(result.mask, (before != after).any(axis=-1))
    rows = np.stack([item.meta["row"], result.meta["row"]])
    region = part_mask(rows, "feet", SIZE, region=True)
    np.testing.assert_array_equal(region[0], region[1])
    assert not (result.mask & ~region[0]).any()
    assert before[~result.mask].tobytes() == after[~result.mask].tobytes()
    # the change is recorded: the next sub-type, one meta column changed
    old = int(item.meta["row"][META_INDEX["foot_subtype"]])
    assert result.changed["attribute"] == "foot_subtype" and result.changed["part"] == "feet"
    assert result.changed["from_value"] == old and result.changed["to_value"] == (old + 1) % 10
    assert np.flatnonzero(rows[0] != rows[1]).tolist() == [META_INDEX["foot_subtype"]]
    assert "feet" in result.description


@pytest.mark.parametrize("part", list(ROBOT_PARTS))
def test_every_editable_part_gives_a_nonempty_local_mask(robots, part):
    cfg, _, items = robots
    editor = RobotEditor(cfg)
    for item in items[:3]:
        result = editor.edit(item, EditInstruction(concept=part))
        assert result.mask.any() and result.changed["visible"]
        region = part_mask(np.stack([item.meta["row"], result.meta["row"]]), part, SIZE, region=True)[0]
        assert not (result.mask & ~region).any()


def test_noise_blur_and_occlusion_keep_outside_pixels_identical(noisy_robots):
    cfg, _, items = noisy_robots
    editor = RobotEditor(cfg)
    for item in items:
        result = editor.edit(item, EditInstruction(concept="foot_pointy"))
        before, after = item.array, np.asarray(result.image)
        assert result.mask.any() and before[~result.mask].tobytes() == after[~result.mask].tobytes()
        old, new = result.changed["from_value"], result.changed["to_value"]
        assert (old >= 5) != (new >= 5) and new % 5 == old % 5  # a group word flips flat <-> pointy
        hidden = editor.edit(item, EditInstruction(concept="hands"))  # occluded: nothing visible changes
        assert not hidden.mask.any() and not hidden.changed["visible"]
        assert np.asarray(hidden.image).tobytes() == before.tobytes()


@pytest.mark.parametrize(
    "concept,target,attr,value",
    [("mouth", "open", "mouth_closed", 0), ("mouth", "closed", "mouth_closed", 1), ("Head shape", "round", "head_round", 1),
     ("feet", "spike", "foot_subtype", 5), ("hand_edgy", "star", "hand_subtype", 5), ("knees", "present", "knees", 1),
     ("ears_triangle", "triangle", "ears_triangle", 1), ("antennae", "0", "antennae", 0)],
)  # fmt: skip
def test_structured_targets(concept, target, attr, value):
    row = np.zeros(len(META_INDEX), dtype=np.int64)
    row[META_INDEX["foot_subtype"]] = 1
    row[META_INDEX[attr]] = 1 - value if attr not in ("foot_subtype", "hand_subtype") else 0
    image = Image.fromarray(RobotEditor(robot_cfg()).render_item(row))
    result = RobotEditor(robot_cfg()).edit(EditItem(image, row, "robot"), EditInstruction(concept, target=target))
    assert result.changed["attribute"] == attr and result.changed["to_value"] == value
    assert result.meta["row"][META_INDEX[attr]] == value


def test_robot_errors(robots):
    cfg, _, items = robots
    editor = RobotEditor(cfg)
    with pytest.raises(ValueError, match=r"unknown robot concept 'wheels'.*knees, feet.*not editable: legs"):
        editor.edit(items[0], EditInstruction(concept="wheels"))
    with pytest.raises(ValueError, match="names several parts"):
        resolve_robot_part("hands and feet")
    with pytest.raises(ValueError, match="not a value of foot_subtype"):
        editor.edit(items[0], EditInstruction(concept="feet", target="wheel"))
    current = items[0].meta["row"][META_INDEX["mouth_closed"]]
    with pytest.raises(ValueError, match="nothing to edit"):
        editor.edit(items[0], EditInstruction(concept="mouth", target=str(current)))
    with pytest.raises(ValueError, match="not the re-render"):  # wrong config for the item
        RobotEditor(robot_cfg(blur=1.0)).edit(items[0], EditInstruction(concept="feet"))
    with pytest.raises(ValueError, match="edits robot items"):
        editor.edit(EditItem(items[0].image), EditInstruction(concept="feet"))
    assert resolve_robot_part("foot_pointy") == "feet" and resolve_robot_part("Antenna") == "antennae"


# --------------------------------------------------------------------------- sudoku
@pytest.fixture(scope="module", params=[{"cell_size": 50, "style": "printed"},
                                        {"cell_size": 18, "style": "handwritten", "pencil_prob": 0.3, "noise": 5.0}])  # fmt: skip
def boards(request):
    cfg = SudokuConfig(n_train=0, n_val=0, n_calib=0, n_test=2, n_mip_seeds=1, **request.param)
    data = sudoku_generate(cfg)
    return cfg, data, sudoku_items(cfg, "test", data=data)


@pytest.mark.parametrize("concept,target,rc", [("row 4 column 7", None, (4, 7)), ("cell r1c1", "empty", (1, 1)),
                                               ("cell_r9c9", None, (9, 9)), ("Row 2, col 3", None, (2, 3))])  # fmt: skip
def test_sudoku_digit_edit_changes_only_that_cell(boards, concept, target, rc):
    cfg, data, items = boards
    item = items[1]
    result = SudokuEditor(cfg).edit(item, EditInstruction(concept=concept, target=target))
    r, c = rc
    old = int(item.meta["board"][r - 1, c - 1])
    assert result.changed["from"] == old and result.changed["to"] == (0 if target else old % 9 + 1)
    assert result.changed["checks"] == [f"row{r}", f"col{c}", f"box{(r - 1) // 3 * 3 + (c - 1) // 3 + 1}"]
    y0, y1, x0, x1 = cell_box(r - 1, c - 1, cfg.cell_size)
    box = np.zeros(result.mask.shape, dtype=bool)
    box[y0:y1, x0:x1] = True
    before, after = item.array, np.asarray(result.image)
    assert result.mask.any() and not (result.mask & ~box).any()
    assert before[~box].tobytes() == after[~box].tobytes() and before.tobytes() != after.tobytes()
    assert (result.meta["board"] != item.meta["board"]).sum() == 1
    assert SudokuEditor(cfg).render(item.meta["board"][None], np.array([item.meta["render_seed"]]))[0].tobytes() == (
        np.repeat(data.x[item.meta["index"]][..., None], 3, axis=-1).tobytes()  # boards are stored grey
    )


def test_sudoku_errors(boards):
    cfg, _, items = boards
    editor = SudokuEditor(cfg)
    with pytest.raises(ValueError, match=r"not a cell; expected 'row R column C'"):
        editor.edit(items[0], EditInstruction(concept="row 4"))
    with pytest.raises(ValueError, match="not a cell"):
        parse_cell("r10c1")
    with pytest.raises(ValueError, match="must be a digit 1..9"):
        editor.edit(items[0], EditInstruction(concept="r1c1", target="ten"))
    assert parse_cell("R4C7") == (4, 7) and parse_cell("row 4 column 7") == (4, 7)


# --------------------------------------------------------------------------- hosted
def _png_b64(colour: tuple[int, int, int]) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


INSTRUCTION = EditInstruction(
    concept="feet", keep="everything else", change="the feet", how="make them pointy", constraints="same style"
)


def test_hosted_editor_posts_multipart_and_decodes(httpserver):
    httpserver.expect_request("/v1/images/edits", method="POST").respond_with_json(
        {"created": 0, "data": [{"b64_json": _png_b64((10, 200, 30))}]}
    )
    editor = HostedImageEditor("edit-model", base_url=httpserver.url_for("/v1"), api_key="test", timeout=5, max_retries=0)
    item = EditItem(Image.new("RGB", (8, 8), (0, 0, 0)))
    result = editor.edit(item, INSTRUCTION)
    assert isinstance(result, EditResult) and result.mask is None
    assert result.image.mode == "RGB" and result.image.getpixel((3, 3)) == (10, 200, 30)
    (request, _), = httpserver.log
    assert request.path == "/v1/images/edits" and request.content_type.startswith("multipart/form-data")
    assert request.form["model"] == "edit-model"
    prompt = request.form["prompt"]
    for line in ("Keep: everything else", "Change: the feet", "How: make them pointy", "Constraints: same style"):
        assert line in prompt
    uploaded = next(iter(request.files.values()))
    assert Image.open(uploaded.stream).size == (8, 8)


def test_hosted_editor_server_error_is_clear(httpserver):
    httpserver.expect_request("/v1/images/edits").respond_with_json({"error": {"message": "boom"}}, status=500)
    editor = HostedImageEditor("m", base_url=httpserver.url_for("/v1"), api_key="test", timeout=5, max_retries=0)
    with pytest.raises(EditError, match=r"hosted image edit failed \(m at .*\): HTTP 500"):
        editor.edit(EditItem(Image.new("RGB", (8, 8))), INSTRUCTION)


# --------------------------------------------------------------------------- diffusers + factory
def test_diffusers_missing_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "diffusers", None)  # import diffusers -> ImportError, installed or not
    with pytest.raises(MissingDependencyError, match="pip install diffusers") as err:
        DiffusersEditor("/nonexistent/model")
    assert isinstance(err.value, ImportError)
    with pytest.raises(ImportError, match="pip install diffusers"):
        make_editor("diffusers", model_path="/nonexistent/model")


def test_make_editor(robots):
    cfg = robots[0]
    editor = make_editor("synthetic_robot", cfg=cfg)
    assert isinstance(editor, RobotEditor) and isinstance(editor, Editor)
    assert isinstance(make_editor("synthetic_sudoku", cfg={"cell_size": 18}), SudokuEditor)
    assert isinstance(make_editor("hosted", api_key="x", base_url="http://127.0.0.1:9"), HostedImageEditor)
    with pytest.raises(ValueError, match=r"unknown editor kind 'photoshop'; expected one of \['diffusers', 'diffusers_inpaint', 'hosted'"):
        make_editor("photoshop")


def test_edit_result_validates_mask():
    with pytest.raises(ValueError, match="mask must be bool"):
        EditResult(Image.new("RGB", (4, 4)), np.zeros((4, 5), dtype=bool), "x")
    with pytest.raises(ValueError, match="kind must be one of"):
        EditItem(Image.new("RGB", (4, 4)), kind="video")
