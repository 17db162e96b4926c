"""Tiny randomly initialised vision-language models, one per supported family, each with its
processor, built from configs and saved as a normal model directory: the local backend, EDCT and
fine-tuning run on them end to end with no downloads (tests, CI, smoke runs). Their replies are
random text; what they exercise is the real loading, prompt, image and generation path.

Families (:data:`FAMILIES`): ``qwen2_vl`` (the default), ``qwen2_5_vl``, ``qwen3_vl``, ``llava``,
``llava_next``, ``idefics3``, ``smolvlm``, ``gemma3`` and ``paligemma``. Every tokenizer is
character level (printable ASCII + the family's own special tokens), so any prompt tokenizes
without a trained vocabulary.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
UNK = "<unk>"


def chat_template(image: str, start: str = "<|im_start|>", end: str = "<|im_end|>", assistant: str = "assistant") -> str:
    """A turn-based chat template: ``{start}{role}\\n{content}{end}\\n`` per message, images as the
    ``image`` placeholder (the processor expands it to the image's tokens), ``assistant`` the name
    the family gives the model's role."""
    role = "{{ message['role'] }}" if assistant == "assistant" else f"{{{{ '{assistant}' if message['role'] == 'assistant' else message['role'] }}}}"
    return (
        f"{{% for message in messages %}}{start}{role}\n"
        "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
        f"{{% if part['type'] == 'image' %}}{image}"
        f"{{% elif part['type'] == 'text' %}}{{{{ part['text'] }}}}{{% endif %}}{{% endfor %}}{{% endif %}}{end}\n{{% endfor %}}"
        f"{{% if add_generation_prompt %}}{start}{assistant}\n{{% endif %}}"
    )


#: Qwen-style chat template: images as ``<|vision_start|><|image_pad|><|vision_end|>`` placeholders.
CHAT_TEMPLATE = chat_template("<|vision_start|><|image_pad|><|vision_end|>")


@dataclass(frozen=True)
class TinyVLMConfig:
    """Sizes of the tiny model; ``image_px`` fixes the processor's pixel budget (min = max) or
    image side."""

    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 128
    vision_width: int = 32
    vision_layers: int = 2
    vision_heads: int = 2
    image_px: int = 56
    max_positions: int = 8192
    seed: int = 0
    family: str = "qwen2_vl"
    #: vision patch side (``qwen2_vl`` only; 0 = the family's own): with it the image side is
    #: ``image_px`` and the grid ``image_px / patch`` (small native renders without upscaling)
    patch: int = 0
    #: whole words or phrases added to the character vocabulary as single (non-special) tokens
    words: tuple[str, ...] = ()

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def char_vocab(specials: tuple[str, ...] = SPECIAL_TOKENS) -> dict[str, int]:
    """Special tokens, then printable characters (no vertical tab / form feed), then ``<unk>``."""
    chars = [c for c in string.printable if c not in "\x0b\x0c"]
    return {t: i for i, t in enumerate([*specials, *chars, UNK])}


def build_tokenizer(specials: tuple[str, ...] = SPECIAL_TOKENS, template: str | None = CHAT_TEMPLATE, pad: str = SPECIAL_TOKENS[0],
                    eos: str = "<|im_end|>", bos: str | None = None, named: dict[str, str] | None = None) -> Any:  # fmt: skip
    """A character-level ``PreTrainedTokenizerFast`` over ``specials`` (each one token), with the
    chat ``template``; ``named`` are the family's named special tokens (``{"image_token": ...}``),
    which its processor reads as tokenizer attributes."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(char_vocab(specials), unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    kwargs: dict[str, Any] = {"extra_special_tokens": named} if named else {}
    if bos is not None:
        kwargs["bos_token"] = bos
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=UNK, pad_token=pad, eos_token=eos,
                                   additional_special_tokens=[s for s in specials if s not in (pad, bos) and s not in (named or {}).values()],
                                   **kwargs)  # fmt: skip
    if template is not None:
        fast.chat_template = template
    return fast


def _ids(tok: Any, **tokens: str) -> dict[str, int]:
    return {k: int(tok.convert_tokens_to_ids(v)) for k, v in tokens.items()}


def _text(cfg: TinyVLMConfig, tok: Any, **extra: Any) -> dict[str, Any]:
    """The language model's config fields shared by every family (sizes and the tokenizer's ids)."""
    return dict(vocab_size=len(tok), hidden_size=cfg.hidden, intermediate_size=cfg.intermediate, num_hidden_layers=cfg.layers,
                num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads, max_position_embeddings=cfg.max_positions,
                pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id or tok.pad_token_id,
                **extra)  # fmt: skip


def _vision(cfg: TinyVLMConfig, **extra: Any) -> dict[str, Any]:
    """A ViT/CLIP/SigLIP-style vision tower's sizes."""
    return dict(hidden_size=cfg.vision_width, intermediate_size=2 * cfg.vision_width, num_hidden_layers=cfg.vision_layers,
                num_attention_heads=cfg.vision_heads, **extra)  # fmt: skip


def _mrope(cfg: TinyVLMConfig) -> dict[str, Any]:
    """Multimodal rope: sections (temporal, height, width) summing to head_dim / 2."""
    half = cfg.head_dim // 2
    return {"rope_type": "default", "mrope_section": [half - 2 * (half // 3), half // 3, half // 3], "rope_theta": 10000.0}


# Qwen families: patch 14 (Qwen3-VL: 16), 2 x 2 merge, the pixel budget fixed to image_px^2.
QWEN_PATCH, QWEN3_PATCH, QWEN_MERGE, QWEN_TEMPORAL = 14, 16, 2, 2


def _qwen_ids(tok: Any) -> dict[str, int]:
    return _ids(tok, image_token_id="<|image_pad|>", video_token_id="<|video_pad|>", vision_start_token_id="<|vision_start|>",
                vision_end_token_id="<|vision_end|>")  # fmt: skip


def _qwen_image_processor(cfg: TinyVLMConfig, patch: int = QWEN_PATCH) -> Any:
    """The pixel budget fixed to one image of side ``image_px`` (scaled with the patch, so each
    Qwen family sees the same grid of merged tokens)."""
    import transformers as hf

    side = cfg.image_px * patch // QWEN_PATCH
    pixels = side * side
    return hf.Qwen2VLImageProcessor(min_pixels=pixels, max_pixels=pixels, patch_size=patch, merge_size=QWEN_MERGE)


def _qwen2_vl(cfg: TinyVLMConfig) -> tuple[Any, Any]:
    import transformers as hf

    tok = build_tokenizer()
    patch = cfg.patch or QWEN_PATCH
    image = _qwen_image_processor(cfg) if not cfg.patch else hf.Qwen2VLImageProcessor(
        min_pixels=cfg.image_px**2, max_pixels=cfg.image_px**2, patch_size=patch, merge_size=QWEN_MERGE)
    proc = hf.Qwen2VLProcessor(image_processor=image, tokenizer=tok, video_processor=hf.Qwen2VLVideoProcessor(),
                            chat_template=CHAT_TEMPLATE)  # fmt: skip
    vision = dict(depth=cfg.vision_layers, embed_dim=cfg.vision_width, hidden_size=cfg.hidden, num_heads=cfg.vision_heads, mlp_ratio=2,
                  patch_size=patch, spatial_merge_size=QWEN_MERGE, temporal_patch_size=QWEN_TEMPORAL, in_chans=3)  # fmt: skip
    config = hf.Qwen2VLConfig(text_config=_text(cfg, tok, rope_parameters=_mrope(cfg)), vision_config=vision, **_qwen_ids(tok),
                           bos_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)  # fmt: skip
    return hf.Qwen2VLForConditionalGeneration(config), proc


def _qwen2_5_vl(cfg: TinyVLMConfig) -> tuple[Any, Any]:
    import transformers as hf

    tok = build_tokenizer()
    proc = hf.Qwen2_5_VLProcessor(image_processor=_qwen_image_processor(cfg), tokenizer=tok, video_processor=hf.Qwen2VLVideoProcessor(),
                               chat_template=CHAT_TEMPLATE)  # fmt: skip
    vision = dict(depth=cfg.vision_layers, hidden_size=cfg.vision_width, intermediate_size=2 * cfg.vision_width, num_heads=cfg.vision_heads,
                  out_hidden_size=cfg.hidden, patch_size=QWEN_PATCH, spatial_merge_size=QWEN_MERGE, temporal_patch_size=QWEN_TEMPORAL,
                  window_size=QWEN_PATCH * QWEN_MERGE * 2, fullatt_block_indexes=[cfg.vision_layers - 1])  # fmt: skip
    config = hf.Qwen2_5_VLConfig(text_config=_text(cfg, tok, rope_parameters=_mrope(cfg)), vision_config=vision, **_qwen_ids(tok))
    return hf.Qwen2_5_VLForConditionalGeneration(config), proc


def _qwen3_vl(cfg: TinyVLMConfig) -> tuple[Any, Any]:
    import transformers as hf

    tok = build_tokenizer()
    proc = hf.Qwen3VLProcessor(image_processor=_qwen_image_processor(cfg, QWEN3_PATCH), tokenizer=tok, video_processor=hf.Qwen3VLVideoProcessor(),
                            chat_template=CHAT_TEMPLATE)  # fmt: skip
    side = cfg.image_px // QWEN3_PATCH + 1
    vision = dict(depth=cfg.vision_layers, hidden_size=cfg.vision_width, intermediate_size=2 * cfg.vision_width, num_heads=cfg.vision_heads,
                  out_hidden_size=cfg.hidden, patch_size=QWEN3_PATCH, spatial_merge_size=QWEN_MERGE, temporal_patch_size=QWEN_TEMPORAL,
                  num_position_embeddings=side * side, deepstack_visual_indexes=[0])  # fmt: skip
    rope = {**_mrope(cfg), "mrope_interleaved": True}
    config = hf.Qwen3VLConfig(text_config=_text(cfg, tok, head_dim=cfg.head_dim, rope_parameters=rope), vision_config=vision, **_qwen_ids(tok))
    return hf.Qwen3VLForConditionalGeneration(config), proc


# LLaVA families: a CLIP tower with patch 14 (LLaVA-Next: 28 px tiles of 2 x 2 patches on a
# grid of up to 2 x 2 tiles, plus the whole image as the base tile).
LLAVA_PATCH, LLAVA_NEXT_TILE = 14, 28
LLAVA_TEMPLATE = chat_template("<image>\n", start="", end="</s>", assistant="assistant")


def _llava_tokenizer() -> Any:
    return build_tokenizer(("<pad>", "<s>", "</s>", "<image>"), LLAVA_TEMPLATE, pad="<pad>", eos="</s>", bos="<s>", named={"image_token": "<image>"})


def _llava(cfg: TinyVLMConfig) -> tuple[Any, Any]:
    import transformers as hf

    tok = _llava_tokenizer()
    side = {"height": cfg.image_px, "width": cfg.image_px}
    proc = hf.LlavaProcessor(image_processor=hf.CLIPImageProcessor(size={"shortest_edge": cfg.image_px}, crop_size=side), tokenizer=tok,
                          patch_size=LLAVA_PATCH, vision_feature_select_strategy="default", num_additional_image_tokens=1,
                          chat_template=LLAVA_TEMPLATE)  # fmt: skip
    vision = _vision(cfg, model_type="clip_vision_model", image_size=cfg.image_px, patch_size=LLAVA_PATCH)
    config = hf.LlavaConfig(vision_config=vision, text_config=_text(cfg, tok, model_type="llama"), vision_feature_layer=-1,
                         vision_feature_select_strategy="default", **_ids(tok, image_token_index="<image>"))  # fmt: skip
    return hf.LlavaForConditionalGeneration(config), proc


def _llava_next(cfg: TinyVLMConfig) -> tuple[Any, Any]:
    import transformers as hf

    tok = _llava_tokenizer()
    t = LLAVA_NEXT_TILE
    pinpoints = [[t, 2 * t], [2 * t, t], [2 * t, 2 * t]]
    image = hf.LlavaNextImageProcessor(size={"shortest_edge": t}, crop_size={"height": t, "width": t}, image_grid_pinpoints=pinpoints)
    proc = hf.LlavaNextProcessor(image_processor=image, tokenizer=tok, patch_size=LLAVA_PATCH, vision_feature_select_strategy="default",
                              num_additional_image_tokens=1, chat_template=LLAVA_TEMPLATE)  # fmt: skip
    vision = _vision(cfg, model_type="clip_vision_model", image_size=t, patch_size=LLAVA_PATCH)
    config = hf.LlavaNextConfig(vision_config=vision, text_config=_text(cfg, tok, model_type="llama"), vision_feature_layer=-1,
                             vision_feature_select_strategy="default", image_grid_pinpoints=pinpoints,
                             **_ids(tok, image_token_index="<image>"))  # fmt: skip
    return hf.LlavaNextForConditionalGeneration(config), proc


# Idefics3 / SmolVLM: 56 px tiles of 8 x 8 patches (patch 7), pixel shuffle 2 -> 16 tokens a tile;
# images up to 2 x 2 tiles, then the global image.
IDEFICS_TILE, IDEFICS_PATCH, IDEFICS_SCALE, IDEFICS_MAX_TILES = 56, 7, 2, 2
IDEFICS_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>", "<global-img>",
                    *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)))  # fmt: skip
IDEFICS_TEMPLATE = chat_template("<image>", end="<end_of_utterance>")
IDEFICS_SEQ = (IDEFICS_TILE // IDEFICS_PATCH) ** 2 // IDEFICS_SCALE**2


def _idefics_tokenizer() -> Any:
    return build_tokenizer(IDEFICS_SPECIALS, IDEFICS_TEMPLATE, eos="<end_of_utterance>",
                           named={"image_token": "<image>", "fake_image_token": "<fake_token_around_image>", "global_image_token": "<global-img>",
                                  "end_of_utterance_token": "<end_of_utterance>"})  # fmt: skip


def _idefics_parts(cfg: TinyVLMConfig, tok: Any) -> dict[str, Any]:
    vision = _vision(cfg, image_size=IDEFICS_TILE, patch_size=IDEFICS_PATCH)
    return dict(vision_config=vision, text_config=_text(cfg, tok, model_type="llama"), scale_factor=IDEFICS_SCALE,
                **_ids(tok, image_token_id="<image>"))  # fmt: skip


def _idefics_images() -> dict[str, Any]:
    return dict(size={"longest_edge": IDEFICS_TILE * IDEFICS_MAX_TILES}, max_image_size={"longest_edge": IDEFICS_TILE}, do_image_splitting=True)


def _idefics3(cfg: TinyVLMConfig) -> tuple[Any, Any]:
    import transformers as hf

    tok = _idefics_tokenizer()
    proc = hf.Idefics3Processor(image_processor=hf.Idefics3ImageProcessor(**_idefics_images()), tokenizer=tok, image_seq_len=IDEFICS_SEQ,
                             chat_template=IDEFICS_TEMPLATE)  # fmt: skip
    return hf.Idefics3ForConditionalGeneration(hf.Idefics3Config(**_idefics_parts(cfg, tok))), proc


def _smolvlm(cfg: TinyVLMConfig) -> tuple[Any, Any]:
    import transformers as hf

    tok = _idefics_tokenizer()
    proc = hf.SmolVLMProcessor(image_processor=hf.SmolVLMImageProcessor(**_idefics_images()), tokenizer=tok, video_processor=hf.SmolVLMVideoProcessor(),
                            image_seq_len=IDEFICS_SEQ, chat_template=IDEFICS_TEMPLATE)  # fmt: skip
    return hf.SmolVLMForConditionalGeneration(hf.SmolVLMConfig(**_idefics_parts(cfg, tok))), proc


# Gemma 3 / PaliGemma: SigLIP towers; Gemma 3 pools 8 x 8 patches to 4 x 4 tokens, PaliGemma keeps 4 x 4 patches.
GEMMA_PATCH, GEMMA_MM_TOKENS, PALIGEMMA_PATCH = 7, 16, 14
GEMMA_SPECIALS = ("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>")
GEMMA_TEMPLATE = chat_template("<start_of_image>", start="<start_of_turn>", end="<end_of_turn>", assistant="model")


def _gemma3(cfg: TinyVLMConfig) -> tuple[Any, Any]:
    import transformers as hf

    tok = build_tokenizer(GEMMA_SPECIALS, GEMMA_TEMPLATE, pad="<pad>", eos="<end_of_turn>", bos="<bos>",
                          named={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"})  # fmt: skip
    image = hf.Gemma3ImageProcessor(size={"height": cfg.image_px, "width": cfg.image_px})
    proc = hf.Gemma3Processor(image_processor=image, tokenizer=tok, image_seq_length=GEMMA_MM_TOKENS, chat_template=GEMMA_TEMPLATE)
    text = _text(cfg, tok, head_dim=cfg.head_dim, query_pre_attn_scalar=cfg.head_dim, sliding_window=cfg.max_positions)
    config = hf.Gemma3Config(text_config=text, vision_config=_vision(cfg, image_size=cfg.image_px, patch_size=GEMMA_PATCH),
                          mm_tokens_per_image=GEMMA_MM_TOKENS, **_ids(tok, boi_token_index="<start_of_image>", eoi_token_index="<end_of_image>",
                                                                      image_token_index="<image_soft_token>"))  # fmt: skip
    return hf.Gemma3ForConditionalGeneration(config), proc


def _paligemma(cfg: TinyVLMConfig) -> tuple[Any, Any]:
    import transformers as hf

    tok = build_tokenizer(("<pad>", "<eos>", "<bos>", "<image>"), None, pad="<pad>", eos="<eos>", bos="<bos>", named={"image_token": "<image>"})
    image = hf.SiglipImageProcessor(size={"height": cfg.image_px, "width": cfg.image_px})
    image.image_seq_length = (cfg.image_px // PALIGEMMA_PATCH) ** 2
    proc = hf.PaliGemmaProcessor(image_processor=image, tokenizer=tok)  # adds its <loc..> / <seg..> tokens: the vocabulary is set after
    vision = _vision(cfg, image_size=cfg.image_px, patch_size=PALIGEMMA_PATCH, projection_dim=cfg.hidden)
    config = hf.PaliGemmaConfig(vision_config=vision, text_config=_text(cfg, tok, model_type="gemma", head_dim=cfg.head_dim),
                             projection_dim=cfg.hidden, **_ids(tok, image_token_index="<image>"))  # fmt: skip
    return hf.PaliGemmaForConditionalGeneration(config), proc


#: family name -> builder (``TinyVLMConfig -> (model, processor)``).
FAMILIES: dict[str, Callable[[TinyVLMConfig], tuple[Any, Any]]] = {
    "qwen2_vl": _qwen2_vl, "qwen2_5_vl": _qwen2_5_vl, "qwen3_vl": _qwen3_vl, "llava": _llava, "llava_next": _llava_next,
    "idefics3": _idefics3, "smolvlm": _smolvlm, "gemma3": _gemma3, "paligemma": _paligemma,
}  # fmt: skip


def check_family(family: str) -> None:
    """One line naming the known families when ``family`` is not one."""
    if family not in FAMILIES:
        raise ValueError(f"family: '{family}' is not one of {', '.join(FAMILIES)}")


def build_tiny_vlm(path: str | Path, cfg: TinyVLMConfig = TinyVLMConfig()) -> Path:
    """Build the tiny model of ``cfg.family`` and its processor and save both to ``path`` (returned)."""
    import torch

    check_family(cfg.family)
    if cfg.patch and (cfg.family != "qwen2_vl" or cfg.patch < 1 or cfg.image_px % (cfg.patch * QWEN_MERGE)):
        raise ValueError(f"patch: {cfg.patch} needs family qwen2_vl and image_px ({cfg.image_px}) a multiple of {QWEN_MERGE} * patch")
    torch.manual_seed(cfg.seed)
    model, proc = FAMILIES[cfg.family](cfg)
    tok = proc.tokenizer
    if cfg.words:
        tok.add_tokens(list(cfg.words))
        model.resize_token_embeddings(len(tok))
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    path = Path(path)
    model.save_pretrained(path)
    proc.save_pretrained(path)
    return path


#: Special tokens of the tiny CLIP's tokenizer: every text is ``<|startoftext|> ... <|endoftext|>``
#: (CLIP pools the text at its end token).
CLIP_SPECIAL = ("<|endoftext|>", "<|startoftext|>")


@dataclass(frozen=True)
class TinyCLIPConfig:
    """Sizes of the tiny CLIP: ``image_px`` is its input side (images are resized to it)."""

    width: int = 32
    layers: int = 2
    heads: int = 2
    projection: int = 16
    image_px: int = 32
    patch: int = 8
    max_text: int = 128
    seed: int = 0


def build_tiny_clip(path: str | Path, cfg: TinyCLIPConfig = TinyCLIPConfig()) -> Path:
    """Build a random ``CLIPModel`` and its character-level tokenizer and save both to ``path``:
    the label-free concept path (``data.concept_source.kind=clip``) runs on it with no downloads."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import CLIPConfig, CLIPModel, PreTrainedTokenizerFast

    vocab = char_vocab(CLIP_SPECIAL)
    eos, bos = vocab[CLIP_SPECIAL[0]], vocab[CLIP_SPECIAL[1]]
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single=f"{CLIP_SPECIAL[1]} $A {CLIP_SPECIAL[0]}",
                                                       special_tokens=[(CLIP_SPECIAL[1], bos), (CLIP_SPECIAL[0], eos)])  # fmt: skip
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=UNK, pad_token=CLIP_SPECIAL[0], eos_token=CLIP_SPECIAL[0],
                                   bos_token=CLIP_SPECIAL[1], model_max_length=cfg.max_text)  # fmt: skip
    common = dict(hidden_size=cfg.width, intermediate_size=2 * cfg.width, num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads)
    config = CLIPConfig(text_config=dict(vocab_size=len(vocab), max_position_embeddings=cfg.max_text, eos_token_id=eos,
                                         bos_token_id=bos, pad_token_id=eos, **common),
                        vision_config=dict(image_size=cfg.image_px, patch_size=cfg.patch, **common),
                        projection_dim=cfg.projection)  # fmt: skip
    torch.manual_seed(cfg.seed)
    model = CLIPModel(config)
    path = Path(path)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path


#: ``--kind`` values of :func:`main` beyond the VLM and CLIP: the edit path's models (:mod:`cbm.vlm.tiny_edit`).
EDIT_KINDS = ("owlv2", "grounding_dino", "sam", "inpaint")


def main(argv: list[str] | None = None) -> int:
    """``python -m cbm.vlm.tiny [--family F | --clip | --kind KIND] DIR``: write the tiny model to DIR (for
    ``client=local client.model=DIR``, ``cbm-finetune model.path=DIR``, ``data.concept_source.checkpoint=DIR``
    with ``--clip``, or EDCT's segmenter / inpainting editor with ``--kind owlv2|grounding_dino|sam|inpaint``).
    An unknown family: one line, exit 2."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m cbm.vlm.tiny", description="Write a tiny random vision-language model (or, with --clip, CLIP) to DIR: no downloads.")
    ap.add_argument("dir")
    ap.add_argument("--family", default=TinyVLMConfig.family, help=f"model family: {' | '.join(FAMILIES)} (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--image-px", type=int, default=TinyVLMConfig.image_px, help="processor pixel budget: side of the square image")
    ap.add_argument("--clip", action="store_true", help="write a tiny random CLIP instead (for data.concept_source.kind=clip)")
    ap.add_argument("--kind", choices=EDIT_KINDS, help="write a tiny random detector, SAM or inpainting pipeline instead (EDCT's edit path)")
    args = ap.parse_args(argv)
    if args.kind:
        from cbm.vlm import tiny_edit

        build = {"owlv2": tiny_edit.build_tiny_owlv2, "grounding_dino": tiny_edit.build_tiny_grounding_dino,
                 "sam": tiny_edit.build_tiny_sam, "inpaint": tiny_edit.build_tiny_inpainting}[args.kind]  # fmt: skip
        print(build(args.dir, tiny_edit.TinyEditConfig(seed=args.seed)))
        return 0
    if args.clip:
        print(build_tiny_clip(args.dir, TinyCLIPConfig(seed=args.seed)))
        return 0
    try:
        check_family(args.family)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(build_tiny_vlm(args.dir, TinyVLMConfig(seed=args.seed, image_px=args.image_px, family=args.family)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
