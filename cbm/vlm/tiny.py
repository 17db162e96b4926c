"""A tiny randomly initialised vision-language model (Qwen2-VL architecture) with its processor,
built from configs and saved as a normal model directory: the local backend, EDCT and
fine-tuning run on it end to end with no downloads (tests, CI, smoke runs). Its replies are
random text; what it exercises is the real loading, chat-template, image and generation path.

The tokenizer is character level (printable ASCII + the model's special tokens), so any prompt
tokenizes without a trained vocabulary.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
UNK = "<unk>"
#: Qwen-style chat template: images as ``<|vision_start|><|image_pad|><|vision_end|>`` placeholders
#: (the processor expands each to the image's patch tokens).
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinyVLMConfig:
    """Sizes of the tiny model; ``image_px`` fixes the processor's pixel budget (min = max)."""

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


def char_vocab(specials: tuple[str, ...] = SPECIAL_TOKENS) -> dict[str, int]:
    """Special tokens, then printable characters (no vertical tab / form feed), then ``<unk>``."""
    chars = [c for c in string.printable if c not in "\x0b\x0c"]
    return {t: i for i, t in enumerate([*specials, *chars, UNK])}


def build_tokenizer():
    """A character-level ``PreTrainedTokenizerFast`` with the chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(char_vocab(), unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=UNK, pad_token=SPECIAL_TOKENS[0], eos_token="<|im_end|>",
                                   additional_special_tokens=list(SPECIAL_TOKENS[1:]))  # fmt: skip
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_vlm(path: str | Path, cfg: TinyVLMConfig = TinyVLMConfig()) -> Path:
    """Build the tiny Qwen2-VL and its processor and save both to ``path`` (returned)."""
    import torch
    from transformers import (
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    vocab = char_vocab()
    tok = build_tokenizer()
    pixels = cfg.image_px * cfg.image_px
    proc = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(min_pixels=pixels, max_pixels=pixels), tokenizer=tok,
                            video_processor=Qwen2VLVideoProcessor(), chat_template=CHAT_TEMPLATE)  # fmt: skip
    head_dim = cfg.hidden // cfg.heads
    half = head_dim // 2  # mrope sections (temporal, height, width) must sum to head_dim / 2
    section = [half - 2 * (half // 3), half // 3, half // 3]
    eos, pad = vocab["<|im_end|>"], vocab[SPECIAL_TOKENS[0]]
    text = dict(vocab_size=len(vocab), hidden_size=cfg.hidden, intermediate_size=cfg.intermediate, num_hidden_layers=cfg.layers,
                num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads, max_position_embeddings=cfg.max_positions,
                rope_parameters={"rope_type": "default", "mrope_section": section, "rope_theta": 10000.0},
                bos_token_id=pad, eos_token_id=eos, pad_token_id=pad)  # fmt: skip
    vision = dict(depth=cfg.vision_layers, embed_dim=cfg.vision_width, hidden_size=cfg.hidden, num_heads=cfg.vision_heads, mlp_ratio=2,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, in_chans=3)  # fmt: skip
    config = Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=vocab["<|image_pad|>"], video_token_id=vocab["<|video_pad|>"],
                           vision_start_token_id=vocab["<|vision_start|>"], vision_end_token_id=vocab["<|vision_end|>"],
                           bos_token_id=pad, eos_token_id=eos, pad_token_id=pad)  # fmt: skip
    torch.manual_seed(cfg.seed)
    model = Qwen2VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
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
    """``python -m cbm.vlm.tiny [--clip | --kind KIND] DIR``: write the tiny model to DIR (for
    ``client=local client.model=DIR``, ``data.concept_source.checkpoint=DIR`` with ``--clip``, or
    EDCT's segmenter / inpainting editor with ``--kind owlv2|grounding_dino|sam|inpaint``)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m cbm.vlm.tiny", description="Write a tiny random Qwen2-VL (or, with --clip, CLIP) to DIR: no downloads.")
    ap.add_argument("dir")
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
    elif args.clip:
        print(build_tiny_clip(args.dir, TinyCLIPConfig(seed=args.seed)))
    else:
        print(build_tiny_vlm(args.dir, TinyVLMConfig(seed=args.seed, image_px=args.image_px)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
