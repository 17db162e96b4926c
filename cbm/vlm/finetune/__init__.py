"""Counterfactual fine-tuning of vision-language models (LoRA on CPU, 4-bit QLoRA on CUDA):
data rows and builders, chat-template collation with answer-only labels, training, and the
before/after evaluation on originals vs counterfactuals with attention localisation."""
