"""Make the sandbox's tiny Llama offline: random weights and a byte-level BPE tokenizer trained here.

Runs inside the SGLang CPU venv (it needs torch, transformers and tokenizers): `python make_tiny_model.py
DEST`. Nothing comes from a model hub. Seeded, so every machine makes the same weights and the same tokenizer,
and output token ids at temperature 0 can be compared across runs and machines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB = 1024
SEED = 20261202


def corpus() -> list[str]:
    """Training text that every Python install has: the stdlib's own sources, in a fixed order."""
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for path in sorted(stdlib.glob("*.py"))[:120]:
        texts.append(path.read_text(encoding="utf-8", errors="replace"))
    return texts


def make_tokenizer(dest: Path, vocab: int = VOCAB) -> None:
    """A byte-level BPE of `vocab` tokens trained on corpus(),
    saved as a fast tokenizer (also the GPU tier's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(dest)


# Attention heads (query, key/value): 4/2 gives head_dim 16; 2/1 gives head_dim 32, the smallest vLLM's CPU
# attention serves (its CPU_ATTN head sizes start at 32). Either split has the same tensor shapes, so the same
# seed gives the same weights.
HEADS = {"h16": (4, 2), "h32": (2, 1)}


def make_model(dest: Path, heads: str = "h16") -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    q_heads, kv_heads = HEADS[heads]
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=q_heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        torch_dtype="bfloat16",
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(dest)


def main(dest: str, heads: str = "h16") -> None:
    path = Path(dest)
    path.mkdir(parents=True, exist_ok=True)
    make_tokenizer(path)
    make_model(path, heads)
    (path / "sglops-model.json").write_text(
        json.dumps(
            {
                "made_by": "sglops sandbox",
                "vocab_size": VOCAB,
                "seed": SEED,
                "weights": "random",
                "heads": list(HEADS[heads]),
            }
        )
        + "\n"
    )


# make_tiny_model.py DEST [h16|h32]
if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] not in HEADS):
        sys.exit(f"usage: make_tiny_model.py DEST [{'|'.join(HEADS)}]")
    main(*sys.argv[1:])
