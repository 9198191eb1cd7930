"""The GPU tier's CPU half (docs/gpu.md): what a device call carries, the inventory the GPU machine gets, and
the H200 profile and play against the REAL sglang 0.5.17 release tree (PyPI wheel, pip's installed layout).

The GPU half ran on an H200 under sglops (records in benchmarks/results/gpu-e2e); these tests keep its inputs
honest on every CI run: the profile still renders for 0.5.17, the play still plans all 13 steps, the probe
still finds the whole-pool cast at 0.5.17's lines, and `up` still writes an inventory sglops accepts.
"""

from __future__ import annotations

import json
import os
import re
import tarfile

import pytest

from sglops.core.hosts import load_inventory, resolve_one
from sglops.sandbox import gpu_tier, make_tiny_mla, trees
from tests.conftest import REPO, inv_cmd, require_real_server_env


@pytest.fixture(scope="module")
def tier(tmp_path_factory):
    """`up` on a carry set shaped as `build` makes it (the archives' contents are small stand-ins here)."""
    src = tmp_path_factory.mktemp("gpu-src")
    for archive, member in (("site.tar.xz", "sglang"), ("tools.tar.xz", "fabric")):
        stage = src / f"{member}-stage" / member
        stage.mkdir(parents=True)
        (stage / "__init__.py").write_text("")
        with tarfile.open(src / archive, "w:xz") as tar:
            tar.add(stage, arcname=member)
    for name, (heads, layers) in gpu_tier.MODELS.items():
        (src / name).mkdir()
        (src / name / "config.json").write_text(json.dumps(make_tiny_mla.config(heads, layers)))
    root = tmp_path_factory.mktemp("gpu-root")
    env = gpu_tier.up(src, root)
    site = tmp_path_factory.mktemp("site-0.5.17")
    trees.make_installed_sglang("0.5.17", site)
    return {
        "root": root,
        "env": env,
        "site": site,
        "run_env": {
            "SGLOPS_INVENTORY": str(root / "hosts.yaml"),
            "SGLOPS_ARTIFACTS": str(root / "artifacts"),
        },
    }


def test_up_writes_an_inventory_sglops_accepts_and_an_environment_without_nvlink_multicast(tier):
    host = resolve_one("local", load_inventory(tier["root"] / "hosts.yaml"))
    assert host.is_local and {"model_dir", "pythonpath", "jit_dir", "trace_dir"} <= set(host.vars)
    assert host.vars["pythonpath"].split(":")[:2] == [str(tier["root"] / "site"), str(tier["root"] / "tools")]
    env_sh = (tier["root"] / "env.sh").read_text()
    for line in (
        "NCCL_NVLS_ENABLE=0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST=1",
        "NVSHMEM_DISABLE_NVLS=1",
        "HF_HUB_OFFLINE=1",
        f"SGLOPS_INVENTORY={tier['root']}/hosts.yaml",
    ):
        assert f"export {line}\n" in env_sh
    assert (tier["root"] / "site" / "sglang" / "__init__.py").exists()


def test_the_h200_profile_renders_for_the_real_0517_tree(tier):
    proc = inv_cmd(
        "render",
        "h200-tiny-mla-fp8",
        "--host",
        "local",
        "--sglang-root",
        str(tier["site"]),
        env=tier["run_env"],
    )
    assert proc.returncode == 0, proc.stderr
    for flag in (
        "--attention-backend flashinfer",
        "--kv-cache-dtype fp8_e4m3",
        "--max-total-tokens 1048576",
        "--cuda-graph-max-bs 8",
        "--load-format dummy",
    ):
        assert flag in proc.stdout
    assert f"export PYTHONPATH={tier['env']['PYTHONPATH']}" in proc.stdout
    assert "validated against sglang 0.5.17" in proc.stdout + proc.stderr
    assert "casts the whole KV pool" in proc.stdout + proc.stderr


def test_the_tp2_profile_renders_and_dry_runs_for_two_gpus_of_one_machine(tier):
    """The seeds' loop at TP=2 (a multi-GPU device run): the profile renders for the 0.5.17 tree with
    --tp-size 2, keeps NVLink multicast off, derives nothing a GPU host does not need, and its restart dry-run
    plans."""
    proc = inv_cmd(
        "render",
        "h200-tiny-mla-fp8-tp2",
        "--host",
        "local",
        "--sglang-root",
        str(tier["site"]),
        "--json",
        env=tier["run_env"],
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "--tp-size 2" in out["script"] and "--kv-cache-dtype fp8_e4m3" in out["script"]
    assert "export NCCL_NVLS_ENABLE=0\n" in out["script"] and out["derived_env"] == []
    proc = inv_cmd(
        "restart",
        "h200-tiny-mla-fp8-tp2",
        "--host",
        "local",
        "--sglang-root",
        str(tier["site"]),
        "--dry-run",
        "--json",
        env=tier["run_env"],
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["dry_run"] and any("wait up to" in step for step in plan["plan"]), plan["plan"]


def test_the_128_head_profile_serves_the_128_head_model_that_up_put_beside_the_16_head_one(tier):
    """Above 16 heads per GPU the fp8-mla-native patch dispatches to gather-cast: the tier carries a 128-head
    model (DeepSeek-V3's count at TP 1) so that branch runs end to end on the real server (docs/gpu.md)."""
    configs = {
        name: json.loads((tier["root"] / name / "config.json").read_text()) for name in gpu_tier.MODELS
    }
    shapes = {name: (c["num_attention_heads"], c["num_hidden_layers"]) for name, c in configs.items()}
    assert shapes == {"tiny-mla": (16, 4), "tiny-mla-h128": (128, 4), "tiny-mla-l32": (16, 32)}
    proc = inv_cmd(
        "render",
        "h200-tiny-mla-fp8-h128",
        "--host",
        "local",
        "--sglang-root",
        str(tier["site"]),
        env=tier["run_env"],
    )
    assert proc.returncode == 0, proc.stderr
    assert str(tier["root"] / "tiny-mla-h128") in proc.stdout and "--kv-cache-dtype fp8_e4m3" in proc.stdout
    # the made weights are loaded, not replaced by dummy ones
    made = inv_cmd(
        "render",
        "h200-tiny-mla-fp8-rw",
        "--host",
        "local",
        "--sglang-root",
        str(tier["site"]),
        env=tier["run_env"],
    )
    assert made.returncode == 0, made.stderr
    assert str(tier["root"] / "tiny-mla-rw") in made.stdout and "--load-format" not in made.stdout


def test_the_play_plans_every_step_and_ab_against_the_0517_tree(tier):
    proc = inv_cmd(
        "play",
        "gpu-fp8-kv",
        "--host",
        "local",
        "--sglang-root",
        str(tier["site"]),
        "--dry-run",
        env=tier["run_env"],
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert "sglang-0.5.17 (exact match for sglang 0.5.17)" in proc.stdout
    assert "[13/13] ab (ab) ok" in proc.stdout and "nothing changed or recorded" in proc.stdout


def test_the_probe_flags_the_whole_pool_cast_at_0517s_lines(tier):
    proc = inv_cmd(
        "probe-backends", "--host", "local", "--sglang-root", str(tier["site"]), "--json", env=tier["run_env"]
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    row = next(b for b in doc["backends"] if b["name"] == "flashinfer_mla")
    assert [(h["func"], h["line"]) for h in row["hits"]["casts_whole_pool"]] == [
        ("forward_extend", 598),
        ("forward_decode", 660),
    ]
    assert any("forward_decode L660" in f and "gather-cast" in f for f in doc["flags"])


def test_the_tiny_model_has_deepseek_v2s_576_wide_latent_kv_and_no_moe_layer():
    c = make_tiny_mla.config()
    assert c["architectures"] == ["DeepseekV2ForCausalLM"] and c["q_lora_rank"] is None
    assert c["kv_lora_rank"] + c["qk_rope_head_dim"] == 576
    assert c["first_k_dense_replace"] == c["num_hidden_layers"] and isinstance(c["n_routed_experts"], int)


def test_every_carried_wheel_is_pinned_once():
    for pins in (gpu_tier.SERVER_PINS, gpu_tier.TOOL_PINS):
        names = [p.split("==")[0].lower().replace("_", "-") for p in pins]
        assert all(p.count("==") == 1 for p in pins) and len(names) == len(set(names))
    assert f"sglang=={gpu_tier.SGLANG_VERSION}" in gpu_tier.SERVER_PINS


def test_up_seeds_flashinfer_with_modules_an_earlier_call_built_for_this_version_only(tmp_path):
    """The jit.tar.gz `collect` brought back (FlashInfer's own cache layout) becomes ahead-of-time modules for
    the same FlashInfer version; a module of another version, or a stray file, is left for FlashInfer to
    compile."""
    site = tmp_path / "site"
    (site / "flashinfer").mkdir(parents=True)
    (site / "flashinfer" / "_build_meta.py").write_text('__version__ = "0.6.15.post1"\n')
    archive = tmp_path / "jit.tar.gz"
    base = "tmp/gpu-tier/flashinfer-jit/.cache/flashinfer"
    members = {
        f"{base}/0.6.15.post1/90a/cached_ops/norm/norm.so": b"norm-so",
        f"{base}/0.6.15.post1/90a/cached_ops/batch_mla_x/batch_mla_x.so": b"mla-so",
        f"{base}/0.6.12/90a/cached_ops/old/old.so": b"old-so",
        f"{base}/0.6.15.post1/90a/cached_ops/norm/build.ninja": b"ninja",
    }
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in members.items():
            f = tmp_path / "blob"
            f.write_bytes(data)
            tar.add(f, arcname=name)
    placed = gpu_tier.seed_jit_modules(archive, site)
    aot = site / "flashinfer" / "data" / "aot"
    assert sorted(placed) == ["batch_mla_x", "norm"]
    assert (aot / "norm" / "norm.so").read_bytes() == b"norm-so"
    assert (aot / "batch_mla_x" / "batch_mla_x.so").read_bytes() == b"mla-so"
    assert not (aot / "old").exists()
    assert gpu_tier.seed_jit_modules(tmp_path / "absent.tar.gz", site) == []


def _native_play_dry_run(tier, *variables: str) -> str:
    """What `inv play gpu-fp8-native --dry-run` prints against the 0.5.17 tree, with these --var settings."""
    given = [arg for v in variables for arg in ("--var", v)]
    proc = inv_cmd(
        "play",
        "gpu-fp8-native",
        "--host",
        "local",
        "--sglang-root",
        str(tier["site"]),
        *given,
        "--dry-run",
        env=tier["run_env"],
    )
    return proc.stdout + proc.stderr


def test_the_native_play_dry_run_counts_the_kernel_its_earlier_step_would_build(tier):
    """fp8-mla-native requires fp8_mla_decode built for this GPU; in the play's dry run the build step before
    it would build it, so the requirement is judged on that planned build (not "unknown": nothing is
    installed). This CPU machine has no GPU, so the build is planned for arch "none" and the plan stops there,
    with the GPU's SM."""
    out = _native_play_dry_run(tier)
    assert "[2/13] kernel-native (build-kernel) ok" in out and "would-build" in out
    assert "[7/13] gather-unpatch (revert-patch) ok" in out
    assert "native-patch" in out and "gpu_sm is None, needs in ['sm90', 'sm120']" in out
    assert "kernel_fp8_mla_decode_for_this_gpu is False" in out and "unknown on this host" not in out


def test_a_planned_build_for_this_gpus_arch_meets_the_kernel_requirement():
    from sglops.patch.kernel_facts import kernel_facts, planned_kernels

    records = {
        "k": {
            "do": "build-kernel",
            "result": {"kernel": "fp8_mla_decode", "status": "would-build", "arch": "sm_90a"},
        },
        "g": {
            "do": "build-kernel",
            "result": {"kernel": "gather_cast", "status": "unchanged", "arch": "sm_90a"},
        },
    }
    pending = planned_kernels(True, records)
    assert pending == [{"name": "fp8_mla_decode", "arch": "sm_90a"}]
    assert kernel_facts(pending, "sm90")["kernel_fp8_mla_decode_for_this_gpu"] is True
    assert planned_kernels(False, records) == []


def test_kept_jit_modules_are_recompressed_as_xz_and_still_seed(tmp_path):
    """keep-jit turns collect's jit.tar.gz into jit.tar.xz (the carry set is within MBs of a call's limit),
    drops an older jit.tar.gz beside it, and `up` finds and seeds from the xz one."""
    site = tmp_path / "site"
    (site / "flashinfer").mkdir(parents=True)
    (site / "flashinfer" / "_build_meta.py").write_text('__version__ = "0.6.15.post1"\n')
    collected = tmp_path / "collected.tar.gz"
    blob = tmp_path / "blob"
    blob.write_bytes(b"norm-so" * 1000)
    with tarfile.open(collected, "w:gz") as tar:
        tar.add(blob, arcname="tmp/j/.cache/flashinfer/0.6.15.post1/90a/cached_ops/norm/norm.so")
    carry = tmp_path / "carry"
    carry.mkdir()
    (carry / "jit.tar.gz").write_bytes(b"stale")
    kept = gpu_tier.keep_jit(collected, carry)
    assert kept.name == "jit.tar.xz" and not (carry / "jit.tar.gz").exists()
    assert gpu_tier.jit_archive(carry) == kept
    with tarfile.open(kept, "r:xz") as tar:
        assert [m.name.rsplit("/", 1)[-1] for m in tar.getmembers()] == ["norm.so"]
    assert gpu_tier.seed_jit_modules(gpu_tier.jit_archive(carry), site) == ["norm"]


def test_the_tiny_models_weights_name_every_tensor_deepseek_v2_lite_checkpoints_do():
    """SGLang's loader maps checkpoint names; these are transformers' DeepseekV2ForCausalLM state-dict keys
    for this config (checked once against transformers 5.19 on the meta device), so a real (non-dummy) load
    finds each."""
    from sglops.sandbox import tiny_mla_weights

    shapes = tiny_mla_weights.tensor_shapes(make_tiny_mla.config(16, 4))
    layer0 = {k[len("model.layers.0.") :]: v for k, v in shapes.items() if k.startswith("model.layers.0.")}
    assert layer0 == {
        "self_attn.q_proj.weight": (3072, 2048),
        "self_attn.kv_a_proj_with_mqa.weight": (576, 2048),
        "self_attn.kv_a_layernorm.weight": (512,),
        "self_attn.kv_b_proj.weight": (4096, 512),
        "self_attn.o_proj.weight": (2048, 2048),
        "mlp.gate_proj.weight": (5632, 2048),
        "mlp.up_proj.weight": (5632, 2048),
        "mlp.down_proj.weight": (2048, 5632),
        "input_layernorm.weight": (2048,),
        "post_attention_layernorm.weight": (2048,),
    }
    assert len(shapes) == 4 * 10 + 3 and shapes["lm_head.weight"] == (4096, 2048)


_KV_ROWS = """
import json, sys, torch
from safetensors.torch import load_file
d = sys.argv[1]; c = json.load(open(d + "/config.json")); w = load_file(d + "/model.safetensors")
def rms(x, g): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g
def kv_row(get):  # embedding -> input_layernorm -> kv_a_proj_with_mqa -> kv_a_layernorm on the latent, as FP8
    h = rms(get("model.embed_tokens.weight")[:64], get("model.layers.0.input_layernorm.weight"))
    kv = h @ get("model.layers.0.self_attn.kv_a_proj_with_mqa.weight").T
    r = c["kv_lora_rank"]
    lat = rms(kv[:, :r], get("model.layers.0.self_attn.kv_a_layernorm.weight"))
    return torch.cat([lat, kv[:, r:]], -1).to(torch.float8_e4m3fn).float()
g = torch.Generator().manual_seed(0)
dummy = lambda name: torch.empty(w[name].shape).uniform_(-1e-3, 1e-3, generator=g)  # --load-format dummy
ours, zeros = kv_row(lambda name: w[name].float()), kv_row(dummy)
print(json.dumps({"ours_zero_share": (ours == 0).float().mean().item(),
                  "ours_rms": ours.pow(2).mean().sqrt().item(),
                  "dummy_zero_share": (zeros == 0).float().mean().item(),
                  "dtypes": sorted({str(t.dtype) for t in w.values()}),
                  "norm_gains": w["model.norm.weight"].float().unique().tolist(),
                  "std": w["model.layers.0.mlp.up_proj.weight"].float().std().item(), "names": len(w)}))
"""


def test_the_made_weights_fill_the_fp8_kv_pool_where_dummy_weights_leave_only_zeros(tmp_path):
    """Why the tier makes weights at all: through the real layer-0 path to a KV row (norm, kv_a_proj,
    kv_a_layernorm, FP8), SGLang's dummy U(-1e-3, 1e-3) gives an all-zero FP8 row (no attention kernel can
    then differ from another), the made N(0, 0.02) weights with unit norm gains give rows of RMS ~1. Runs the
    module as on the GPU machine (its CLI, torch on the CPU) in the SGLang CPU venv, on a small config of the
    same layout."""
    import subprocess

    from sglops.sandbox import sglang_cpu, tiny_mla_weights

    require_real_server_env()
    python = str(sglang_cpu.venv_python())
    src = tmp_path / "tiny"
    src.mkdir()
    cfg = dict(make_tiny_mla.config(16, 2), hidden_size=256, intermediate_size=512, vocab_size=256)
    (src / "config.json").write_text(json.dumps(cfg))
    (src / "tokenizer.json").write_text("{}")
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    made = subprocess.run(
        [python, "-m", "sglops.sandbox.tiny_mla_weights", str(src), str(tmp_path / "rw"), "--seed", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "rw" / "tokenizer.json").is_file() and not (tmp_path / "rw.part").exists()
    probe = subprocess.run(
        [python, "-c", _KV_ROWS, str(tmp_path / "rw")], capture_output=True, text=True, env=env, timeout=300
    )
    assert probe.returncode == 0, probe.stderr
    doc = json.loads(probe.stdout)
    assert doc["dummy_zero_share"] == 1.0
    assert doc["ours_zero_share"] < 0.05 and 0.3 < doc["ours_rms"] < 3
    assert doc["dtypes"] == ["torch.bfloat16"] and doc["norm_gains"] == [1.0] and 0.015 < doc["std"] < 0.025
    assert doc["names"] == len(tiny_mla_weights.tensor_shapes(cfg))
    bad = subprocess.run(
        [python, "-m", "sglops.sandbox.tiny_mla_weights", str(tmp_path / "none"), str(tmp_path / "x")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and not (tmp_path / "x").exists()


def test_the_identity_play_plans_four_servers_and_the_bf16_yardstick_renders(tier):
    """gpu-fp8-identity benches the same shared-prefix prompts on a BF16 pool, stock FP8, gather-cast and
    fp8-mla-native; the BF16 profile differs from the FP8 one in the KV dtype alone."""
    proc = inv_cmd(
        "play",
        "gpu-fp8-identity",
        "--host",
        "local",
        "--sglang-root",
        str(tier["site"]),
        "--dry-run",
        env=tier["run_env"],
    )
    out = proc.stdout + proc.stderr
    for n, step in (
        (3, "bf16-restart (restart)"),
        (4, "bf16-bench (bench)"),
        (6, "stock-bench (bench)"),
        (9, "gather-bench (bench)"),
        (10, "gather-unpatch (revert-patch)"),
    ):
        # the shared-prefix dataset parsed for every bench
        assert f"[{n}/15] {step} ok" in out, out[-3000:]
    # this CPU machine has no GPU: the plan stops where the native patch needs the kernel built for its SM
    assert "[11/15] native-patch (apply-patch) failed" in out and "gpu_sm is None" in out
    flags = {}
    for name in ("h200-tiny-mla-bf16-rw", "h200-tiny-mla-fp8-rw"):
        made = inv_cmd(
            "render", name, "--host", "local", "--sglang-root", str(tier["site"]), env=tier["run_env"]
        )
        assert made.returncode == 0, made.stderr
        flags[name] = set(re.findall(r"(--[a-z0-9-]+)(?: ([^\s\\-][^\s\\]*))?", made.stdout))
    assert flags["h200-tiny-mla-bf16-rw"] ^ flags["h200-tiny-mla-fp8-rw"] == {
        ("--kv-cache-dtype", "auto"),
        ("--kv-cache-dtype", "fp8_e4m3"),
    }


def test_the_yardstick_table_reads_a_plays_records(tmp_path):
    """The table of gpu-fp8-identity from records shaped as the play leaves them: here the rw model's real
    gather-cast and fp8-mla-native benches of 2026-12-04 (17/18 prompts parted at near ties)."""
    import shutil
    import subprocess
    import sys

    src = REPO / "benchmarks/results/gpu-fp8-native-cuda/v05-rw-2026-12-04/records.tar.xz"
    with tarfile.open(src) as tar:
        tar.extractall(tmp_path / "in", filter="data")
    runs = {p.name.split("-", 3)[-1]: p for p in (tmp_path / "in").iterdir() if (p / "outputs.json").exists()}
    local = tmp_path / "artifacts" / "local"
    steps = []
    for step, run in (
        ("gather-bench", "gather-bench"),
        ("stock-bench", "gather-bench"),
        ("native-bench", "native-bench"),
        ("bf16-bench", "native-bench"),
    ):
        shutil.copytree(runs[run], local / f"p-{step}")
        steps.append({"id": step, "do": "bench", "result": {"run_id": f"p-{step}"}})
    (local / "p").mkdir()
    (local / "p" / "play.json").write_text(json.dumps({"play": "gpu-fp8-identity", "steps": steps}))
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/gpu_identity_yardstick.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    identity_table = proc.stdout.split("\n\n")[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in identity_table.splitlines()}
    assert "| 0/18 |" in rows["stock"] and "| 0 | 0 (2304 tokens) | - | - |" in rows["stock"]
    assert "| 17/18 | token 43 | 0.015 | 0.0319 (694 tokens) | 0.0306 |" in rows["native"]
    assert "| gather | 8 | " in proc.stdout and "| native | 1 | " in proc.stdout


def test_the_tree_a_device_call_copies_is_what_git_does_not_ignore(tmp_path):
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/.gpu/\n")
    (tmp_path / "tracked.py").write_bytes(b"x" * 1000)
    subprocess.run(["git", "-C", str(tmp_path), "add", "tracked.py"], check=True)
    # travels too: git does not ignore it
    (tmp_path / "untracked.md").write_bytes(b"y" * 500)
    (tmp_path / ".gpu").mkdir()
    # a carry path, not the tree
    (tmp_path / ".gpu" / "site.tar.xz").write_bytes(b"z" * 7000)
    assert gpu_tier.tree_bytes(tmp_path) == 1000 + 500 + len("/.gpu/\n")


def _carry_set(dest) -> None:
    """A carry set shaped as `build` makes it, parts of a
    few KiB (incompressible, so sizes are as written)."""
    dest.mkdir(parents=True)
    for archive, member, size in (("site.tar.xz", "sglang", 30_000), ("tools.tar.xz", "fabric", 8_000)):
        with tarfile.open(dest / archive, "w:xz") as tar:
            blob = dest.parent / member / "blob.bin"
            blob.parent.mkdir()
            blob.write_bytes(os.urandom(size))
            (blob.parent / "__init__.py").write_text("")
            tar.add(blob.parent, arcname=member)
    for name, (heads, layers) in gpu_tier.MODELS.items():
        (dest / name).mkdir()
        (dest / name / "config.json").write_text(json.dumps(make_tiny_mla.config(heads, layers)))


def test_carry_is_one_call_when_it_fits_else_two_chained_and_up_waits_for_the_second(tmp_path, capsys):
    dest = tmp_path / "work" / ".gpu"
    _carry_set(dest)
    parts = {p.name: gpu_tier._bytes(p) for p in dest.iterdir()}
    one = gpu_tier.carry(dest, tree=9 * 2**20)
    assert [c["parts"] for c in one["calls"]] == [parts] and not (dest.parent / ".gpu-2").exists()
    # one byte short: the parts the first call cannot take move
    limit = 9 * 2**20 + sum(parts.values()) - 1
    two = gpu_tier.carry(dest, tree=9 * 2**20, limit=limit)
    assert len(two["calls"]) == 2 and {**two["calls"][0]["parts"], **two["calls"][1]["parts"]} == parts
    assert "site.tar.xz" in two["calls"][0]["parts"], "the largest part goes in the first call"
    for call in two["calls"]:
        assert 9 * 2**20 + sum(call["parts"].values()) <= limit
        assert sorted(p.name for p in (dest.parent / call["carry"]).iterdir()) == sorted(call["parts"])
    table = gpu_tier.carry_table(two)
    assert 'call 2: carry [".gpu-2"]' in table and "two chained calls" in table and "the tree (git)" in table
    root = tmp_path / "gpu-root"
    with pytest.raises(gpu_tier.Incomplete, match="carry .gpu-2 in the next call"):
        # the first call: keeps what came
        gpu_tier.up([dest], root)
    assert not (root / "env.sh").exists()
    # the second: with what the first kept, everything
    gpu_tier.up([dest.parent / ".gpu-2"], root)
    assert (root / "env.sh").is_file() and (root / "site" / "sglang" / "blob.bin").is_file()
    # a later carry plans from all the parts again
    again = gpu_tier.carry(dest, tree=9 * 2**20)
    assert len(again["calls"]) == 1 and not (dest.parent / ".gpu-2").exists()


def test_the_documented_call_fits_with_this_tree_and_the_last_builds_parts(tmp_path):
    """docs/gpu.md's sizes of the last real `build` (its Record) and this tree, measured now, in one call."""
    doc = (REPO / "docs" / "gpu.md").read_text()
    sizes = {m.group(1): float(m.group(2)) for m in re.finditer(r"\| `([\w.-]+)` \| ([\d.]+) MiB \|", doc)}
    assert {"site.tar.xz", "tools.tar.xz"} <= set(sizes), "docs/gpu.md's carry table"
    dest = tmp_path / ".gpu"
    dest.mkdir()
    for name, mib in sizes.items():
        # sparse: the size without the bytes
        with (dest / name).open("wb") as f:
            f.truncate(int(mib * 2**20))
    plan = gpu_tier.carry(dest)
    assert len(plan["calls"]) == 1, gpu_tier.carry_table(plan)
    assert plan["tree"] < 10 * 2**20, "the tree a device call copies grew past 10 MiB"


def test_the_native_play_plans_ragged_contexts_on_the_made_weights_model(tier):
    """Issue 37's end-to-end check: the same play with ragged prompt lengths at C=8 and C=16 on the 32-layer
    made-weights profile; the dry run plans the bench with the ranged dataset and the requests asked for."""
    out = _native_play_dry_run(
        tier,
        "profile=h200-tiny-mla-fp8-l32-rw",
        "dataset=random:input=512-16384,output=256",
        "concurrency=[8,16]",
        "requests=32",
    )
    line = next(ln for ln in out.splitlines() if ln.startswith("[5/13] gather-bench (bench) ok"))
    assert "bench 3 repeats of 32 requests" in line
    assert "input 512-16384 / output 256-256 tokens, levels C=8, C=16" in out
