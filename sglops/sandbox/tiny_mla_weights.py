"""Give a GPU-tier tiny MLA model weights of a trained model's magnitudes (made on the GPU machine, seeded).

Why: SGLang's `--load-format dummy` fills every tensor, RMSNorm gains included, from U(-1e-3, 1e-3). The
latent KV rows then have magnitudes ~1e-6, below FP8 e4m3's smallest subnormal (2^-9): the whole FP8 pool
holds zeros, every attention implementation reads the same zeros, and "outputs identical" between two FP8
attention paths proves nothing. Here linear and embedding weights are N(0, initializer_range) and norm gains 1
(transformers' own init for this architecture), so the latent rows have RMS ~1 and attention scores a spread
of ~1: two attention kernels that round differently can give different logprobs, and a comparison of them
means something. Weights are not carried (400 MB for 4 layers): this runs on the GPU machine in seconds, the
same bytes for the same seed.

    # SRC: a tiny-mla dir (config + tokenizer)
    python3 -m sglops.sandbox.tiny_mla_weights SRC DEST [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

NORMS = ("input_layernorm", "post_attention_layernorm")


def tensor_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Checkpoint name -> shape for a DeepSeek-V2 config with no q LoRA and every layer dense
    (DeepSeek-V2-Lite's names, which SGLang's loader maps: gate/up into gate_up_proj, kv_b_proj into
    w_kc/w_vc)."""
    hidden, heads, vocab = config["hidden_size"], config["num_attention_heads"], config["vocab_size"]
    rank, rope, nope, v = (
        config["kv_lora_rank"],
        config["qk_rope_head_dim"],
        config["qk_nope_head_dim"],
        config["v_head_dim"],
    )
    inter = config["intermediate_size"]
    if config.get("q_lora_rank") is not None or config["first_k_dense_replace"] < config["num_hidden_layers"]:
        raise ValueError("only q_proj (no q LoRA) and all-dense layers are laid out here")
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "self_attn.q_proj.weight": (heads * (nope + rope), hidden),
                p + "self_attn.kv_a_proj_with_mqa.weight": (rank + rope, hidden),
                p + "self_attn.kv_a_layernorm.weight": (rank,),
                p + "self_attn.kv_b_proj.weight": (heads * (nope + v), rank),
                p + "self_attn.o_proj.weight": (hidden, heads * v),
                p + "mlp.gate_proj.weight": (inter, hidden),
                p + "mlp.up_proj.weight": (inter, hidden),
                p + "mlp.down_proj.weight": (hidden, inter),
                **{p + f"{n}.weight": (hidden,) for n in NORMS},
            }
        )
    shapes["model.norm.weight"] = (hidden,)
    shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


def is_norm(name: str) -> bool:
    return name.endswith("layernorm.weight") or name == "model.norm.weight"


def make(src: Path, dest: Path, seed: int = 0) -> dict:
    """DEST = SRC's config and tokenizer + model.safetensors
    (BF16). Written beside and renamed: all or nothing."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((src / "config.json").read_text())
    std = float(config.get("initializer_range", 0.02))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = {}
    for name, shape in tensor_shapes(config).items():
        if is_norm(name):
            t = torch.ones(shape, dtype=torch.bfloat16, device=device)
        else:
            t = torch.empty(shape, dtype=torch.float32, device=device).normal_(0.0, std, generator=gen)
        tensors[name] = t.to(torch.bfloat16).cpu()
    part = dest.with_name(dest.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    shutil.copytree(src, part)
    save_file(tensors, str(part / "model.safetensors"), metadata={"format": "pt"})
    params = sum(t.numel() for t in tensors.values())
    info = {
        "made_by": "sglops gpu tier",
        "weights": f"N(0, {std}) linear/embedding, norm gains 1, seed {seed}",
        "params": params,
    }
    (part / "sglops-model.json").write_text(json.dumps(info) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    part.rename(dest)
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not (args.src / "config.json").is_file():
        print(f"tiny_mla_weights: {args.src} has no config.json", file=sys.stderr)
        return 2
    print(json.dumps(make(args.src, args.dest, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
