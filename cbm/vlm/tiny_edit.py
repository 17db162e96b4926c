"""Tiny random models of EDCT's edit path, built from their config classes and saved as normal
checkpoint directories (no downloads): the detectors (OWLv2, Grounding DINO) and SAM behind
:class:`cbm.vlm.segmenters.DetectorSegmenter`, and a Stable Diffusion inpainting pipeline for
:class:`cbm.vlm.editors.diffusers_editor.DiffusersInpaintEditor`. Their outputs are random; what
they exercise is the real loading, pre-/post-processing and inference code. Tokenizers are
character level (a CLIP BPE without merges, a WordPiece of single letters), so any prompt
tokenizes. ``python -m cbm.vlm.tiny --kind owlv2|grounding_dino|sam|inpaint DIR`` writes one.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TinyEditConfig", "build_tiny_grounding_dino", "build_tiny_inpainting", "build_tiny_owlv2", "build_tiny_sam", "clip_bpe_tokenizer"]

CLIP_BOS, CLIP_EOS = "<|startoftext|>", "<|endoftext|>"
#: BERT's special tokens (Grounding DINO's text encoder), then lower-case letters and their continuations.
BERT_SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@dataclass(frozen=True)
class TinyEditConfig:
    """Sizes of the tiny models. ``image_px``: the detectors' and SAM's input side; ``dino_px``:
    Grounding DINO's (its fourth feature level, one stride below the backbone's last, needs more
    than one pixel for its group norm); ``latent_px``: the inpainting UNet's sample size."""

    width: int = 32
    heads: int = 2
    patch: int = 16
    image_px: int = 64
    max_text: int = 16
    dino_px: int = 128
    dino_patch: int = 4
    dino_embed: int = 8
    dino_queries: int = 10
    unet_channels: tuple[int, int] = (8, 16)
    vae_channels: tuple[int, int] = (8, 8)
    latent_channels: int = 4
    latent_px: int = 16
    cross_dim: int = 16
    norm_groups: int = 4
    seed: int = 0


def clip_bpe_tokenizer(max_length: int):
    """A ``CLIPTokenizer`` whose vocabulary is the printable characters (and their word-final
    forms) with no merges: every character is a token."""
    from transformers import CLIPTokenizer

    chars = [chr(c) for c in range(ord("!"), ord("~") + 1)]
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": len(chars) + i for i, c in enumerate(chars)})
    vocab.update({CLIP_BOS: len(vocab), CLIP_EOS: len(vocab) + 1})
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=max_length)


def _clip_text(vocab_size: int, tok, width: int, cfg: TinyEditConfig) -> dict:
    return dict(vocab_size=vocab_size, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=1, num_attention_heads=cfg.heads,
                max_position_embeddings=cfg.max_text, bos_token_id=tok.convert_tokens_to_ids(CLIP_BOS),
                eos_token_id=tok.convert_tokens_to_ids(CLIP_EOS), pad_token_id=tok.convert_tokens_to_ids(CLIP_EOS))  # fmt: skip


def _save(path: str | Path, *parts) -> Path:
    path = Path(path)
    for part in parts:
        part.save_pretrained(path)
    return path


def build_tiny_owlv2(path: str | Path, cfg: TinyEditConfig = TinyEditConfig()) -> Path:
    """A random ``Owlv2ForObjectDetection`` and its ``Owlv2Processor``, saved to ``path``."""
    import torch
    from transformers import Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor, Owlv2Processor

    tok = clip_bpe_tokenizer(cfg.max_text)
    vision = dict(hidden_size=cfg.width, intermediate_size=2 * cfg.width, num_hidden_layers=1, num_attention_heads=cfg.heads,
                  image_size=cfg.image_px, patch_size=cfg.patch)  # fmt: skip
    config = Owlv2Config(text_config=_clip_text(len(tok), tok, cfg.width, cfg), vision_config=vision, projection_dim=cfg.width)
    torch.manual_seed(cfg.seed)
    model = Owlv2ForObjectDetection(config)
    proc = Owlv2Processor(image_processor=Owlv2ImageProcessor(size={"height": cfg.image_px, "width": cfg.image_px}), tokenizer=tok)
    return _save(path, model, proc)


def build_tiny_grounding_dino(path: str | Path, cfg: TinyEditConfig = TinyEditConfig()) -> Path:
    """A random ``GroundingDinoForObjectDetection`` (Swin backbone, BERT text encoder, two decoder
    layers: its box heads are tied across layers) and its processor, saved to ``path``."""
    import torch
    from transformers import (
        BertConfig,
        BertTokenizer,
        GroundingDinoConfig,
        GroundingDinoForObjectDetection,
        GroundingDinoImageProcessor,
        GroundingDinoProcessor,
        SwinConfig,
    )

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    words = [*BERT_SPECIAL, ".", *string.ascii_lowercase, *(f"##{c}" for c in string.ascii_lowercase)]
    (path / "vocab.txt").write_text("\n".join(words) + "\n")
    tok = BertTokenizer(str(path / "vocab.txt"))
    stages = 4
    backbone = SwinConfig(image_size=cfg.dino_px, patch_size=cfg.dino_patch, embed_dim=cfg.dino_embed, depths=[1] * stages,
                          num_heads=[1] * stages, window_size=2, out_indices=[2, 3, 4])  # fmt: skip
    text = BertConfig(vocab_size=len(words), hidden_size=cfg.width, num_hidden_layers=1, num_attention_heads=cfg.heads,
                      intermediate_size=2 * cfg.width, max_position_embeddings=2 * cfg.width)  # fmt: skip
    config = GroundingDinoConfig(backbone_config=backbone, text_config=text, d_model=cfg.width, encoder_layers=1, decoder_layers=2,
                                 encoder_attention_heads=cfg.heads, decoder_attention_heads=cfg.heads, encoder_ffn_dim=2 * cfg.width,
                                 decoder_ffn_dim=2 * cfg.width, num_queries=cfg.dino_queries, encoder_n_points=2, decoder_n_points=2,
                                 max_text_len=cfg.width)  # fmt: skip
    torch.manual_seed(cfg.seed)
    model = GroundingDinoForObjectDetection(config)
    proc = GroundingDinoProcessor(image_processor=GroundingDinoImageProcessor(size={"shortest_edge": cfg.dino_px, "longest_edge": cfg.dino_px}),
                                  tokenizer=tok)  # fmt: skip
    return _save(path, model, proc)


def build_tiny_sam(path: str | Path, cfg: TinyEditConfig = TinyEditConfig()) -> Path:
    """A random ``SamModel`` and its ``SamProcessor`` (images resized and padded to ``image_px``), saved to ``path``."""
    import torch
    from transformers import SamConfig, SamImageProcessor, SamModel, SamProcessor

    vision = dict(hidden_size=cfg.width, num_hidden_layers=1, num_attention_heads=cfg.heads, image_size=cfg.image_px, patch_size=cfg.patch,
                  output_channels=cfg.width, global_attn_indexes=[0], mlp_dim=2 * cfg.width, num_pos_feats=cfg.width // 2)  # fmt: skip
    prompt = dict(hidden_size=cfg.width, image_size=cfg.image_px, patch_size=cfg.patch, mask_input_channels=cfg.latent_channels)
    decoder = dict(hidden_size=cfg.width, num_hidden_layers=2, num_attention_heads=cfg.heads, mlp_dim=2 * cfg.width, iou_head_hidden_dim=cfg.width)
    torch.manual_seed(cfg.seed)
    model = SamModel(SamConfig(vision_config=vision, prompt_encoder_config=prompt, mask_decoder_config=decoder))
    side = {"height": cfg.image_px, "width": cfg.image_px}
    proc = SamProcessor(image_processor=SamImageProcessor(size={"longest_edge": cfg.image_px}, pad_size=side))
    return _save(path, model, proc)


def build_tiny_inpainting(path: str | Path, cfg: TinyEditConfig = TinyEditConfig()) -> Path:
    """A random ``StableDiffusionInpaintPipeline`` (9-channel UNet, 2-level VAE, one-layer CLIP
    text encoder, DDIM scheduler, no safety checker), saved to ``path``."""
    import diffusers
    import torch
    from transformers import CLIPTextConfig, CLIPTextModel

    tok = clip_bpe_tokenizer(cfg.max_text)
    torch.manual_seed(cfg.seed)
    masked_and_mask = cfg.latent_channels + 1  # the inpainting UNet also reads the masked image's latents and the mask
    unet = diffusers.UNet2DConditionModel(
        block_out_channels=cfg.unet_channels, layers_per_block=1, sample_size=cfg.latent_px,
        in_channels=cfg.latent_channels + masked_and_mask, out_channels=cfg.latent_channels,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=cfg.cross_dim, attention_head_dim=cfg.heads, norm_num_groups=cfg.norm_groups,
    )  # fmt: skip
    vae = diffusers.AutoencoderKL(
        block_out_channels=cfg.vae_channels, in_channels=3, out_channels=3, latent_channels=cfg.latent_channels,
        down_block_types=("DownEncoderBlock2D",) * len(cfg.vae_channels), up_block_types=("UpDecoderBlock2D",) * len(cfg.vae_channels),
        norm_num_groups=cfg.norm_groups, sample_size=cfg.image_px,
    )  # fmt: skip
    text = CLIPTextModel(CLIPTextConfig(**_clip_text(len(tok), tok, cfg.cross_dim, cfg)))
    scheduler = diffusers.DDIMScheduler(beta_schedule="scaled_linear", clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    pipe = diffusers.StableDiffusionInpaintPipeline(vae=vae, text_encoder=text, tokenizer=tok, unet=unet, scheduler=scheduler,
                                                    safety_checker=None, feature_extractor=None, requires_safety_checker=False)  # fmt: skip
    return _save(path, pipe)
