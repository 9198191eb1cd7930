"""Make the GPU tier's tiny MLA model offline: a DeepSeek-V2-shaped config and a byte-level BPE tokenizer.

No weights: the GPU server loads it with `--load-format dummy` (SGLang fills every tensor from a fixed seed,
so two starts of one build give the same weights and greedy outputs can be compared across restarts).
The shape is what makes SGLang take its MLA paths: kv_lora_rank 512 + qk_rope_head_dim 64 = the 576-wide
latent KV row of DeepSeek-V2/V3, R1 and GLM-5, 16 heads (or 128: `--heads 128`, DeepSeek-V3's count at
TP 1, where the fp8-mla-native patch dispatches to gather-cast's cast); every layer dense
(`first_k_dense_replace` = layers), so no MoE kernels are needed; transformers 5 still wants
`n_routed_experts` to be an int. Runs in the SGLang CPU venv (tokenizers + transformers): `python
make_tiny_mla.py DEST [--heads N]`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB = 4096
LAYERS = 4


def config(heads: int = 16, layers: int = LAYERS) -> dict:
    return {
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2",
        "torch_dtype": "bfloat16",
        "vocab_size": VOCAB,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        # MLA: a 512-wide latent + 64 rope dims per token = the 576-wide KV row; no q LoRA
        "q_lora_rank": None,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        # MoE fields the config class insists on; every layer is dense, so none are used
        "first_k_dense_replace": layers,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 1408,
        "moe_layer_freq": 1,
        "routed_scaling_factor": 1.0,
        "topk_method": "greedy",
        "n_group": 1,
        "topk_group": 1,
        "norm_topk_prob": False,
        "scoring_func": "softmax",
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000,
        "initializer_range": 0.02,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_cache": True,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 2,
        "tie_word_embeddings": False,
    }


def main(dest: str, heads: int = 16, layers: int = LAYERS) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    # the CPU sandbox's tokenizer recipe, at this vocabulary
    from make_tiny_model import make_tokenizer

    path = Path(dest)
    path.mkdir(parents=True, exist_ok=True)
    make_tokenizer(path, VOCAB)
    (path / "config.json").write_text(json.dumps(config(heads, layers), indent=1) + "\n")
    (path / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}) + "\n")
    (path / "sglops-model.json").write_text(
        json.dumps({"made_by": "sglops gpu tier", "vocab_size": VOCAB, "weights": "--load-format dummy"})
        + "\n"
    )


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest")
    ap.add_argument(
        "--heads", type=int, default=16, help="attention heads (16: the tier's model; 128: DeepSeek-V3's)"
    )
    ap.add_argument(
        "--layers",
        type=int,
        default=LAYERS,
        help="decoder layers (4; 32: attention's share of a decode step as in a real model)",
    )
    args = ap.parse_args()
    main(args.dest, args.heads, args.layers)
