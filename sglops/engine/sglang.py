"""SGLang as an engine: `python -m sglang.launch_server`,
its flag names, /server_info, `sglang::` processes."""

from __future__ import annotations

from typing import Any

from sglops.core.errors import ConfigError
from sglops.engine.base import Engine, flag_values

ORDER = [
    "model_path",
    "served_model_name",
    "tokenizer_path",
    "host",
    "port",
    "device",
    "tp_size",
    "dp_size",
    "ep_size",
    "pp_size",
    "nnodes",
    "node_rank",
    "dist_init_addr",
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "dsa_prefill_backend",
    "dsa_decode_backend",
    "kv_cache_dtype",
    "grammar_backend",
    "mem_fraction_static",
    "context_length",
    "max_running_requests",
    "max_total_tokens",
    "chunked_prefill_size",
    "quantization",
    "moe_runner_backend",
]
BOOLS = ["trust_remote_code", "enable_metrics", "sleep_on_idle"]


def pick(flags: set[str] | None, *candidates: str) -> str:
    """The first spelling of a flag this release knows (offline: the newest spelling)."""
    if flags is None:
        return candidates[0]
    return next((c for c in candidates if c in flags), candidates[0])


def sglang_argv(p: Any, host: Any, flags: set[str] | None) -> tuple[list[str], dict[str, Any]]:
    """launch_server arguments for this profile on this host's release (flags not yet validated; flags: the
    release's own launch flags, None offline)."""
    a = dict(p.args)
    if a.get("nnodes", 1) > 1 and "node_rank" not in a:
        if host is None or host.node_rank is None:
            raise ConfigError(
                f"profile {p.name}: nnodes={a['nnodes']} needs a node_rank for "
                f"{host.name if host else 'this host'} (inventory node_rank or per_host)"
            )
        a["node_rank"] = host.node_rank
    argv: list[str] = []
    for key in ORDER:
        if key not in a:
            continue
        if key.startswith("dsa_"):
            stage = key.split("_")[1]
            flag = pick(flags, f"--dsa-{stage}-backend", f"--nsa-{stage}-backend")
        else:
            flag = "--" + key.replace("_", "-")
        argv += [flag, str(a[key])]
    for key in BOOLS:
        if a.get(key):
            argv.append("--" + key.replace("_", "-"))
    cg = p.cuda_graph
    if cg.get("disable"):
        if flags is None or "--cuda-graph-backend-decode" in flags:
            argv += ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
        else:
            argv.append("--disable-cuda-graph")
    # before 0.5.23
    old_names = flags is not None and "--cuda-graph-max-bs" in flags
    if cg.get("max_bs") is not None:
        argv += ["--cuda-graph-max-bs" if old_names else "--cuda-graph-max-bs-decode", str(cg["max_bs"])]
    if cg.get("bs"):
        argv += ["--cuda-graph-bs" if old_names else "--cuda-graph-bs-decode"] + [str(b) for b in cg["bs"]]
    argv += p.extra_args
    return argv, a


def expected(argv: list[str], effective: dict[str, Any]) -> dict[str, Any]:
    """SGLang's /server_info names every argument by its dest: each rendered flag is checked there."""
    return flag_values(argv)


SGLANG = Engine(
    name="sglang",
    title="SGLang",
    package="sglang",
    dists=("sglang",),
    tree_marker="srt/server_args.py",
    launch_module="sglang.launch_server",
    template="sglang.sh.j2",
    default_port=30000,
    default_bind="127.0.0.1",
    flag_files=("srt/server_args.py", "srt/arg_groups"),
    arg_classes=(),
    choice_flags=(
        "--attention-backend",
        "--prefill-attention-backend",
        "--decode-attention-backend",
        "--nsa-prefill-backend",
        "--nsa-decode-backend",
        "--dsa-prefill-backend",
        "--dsa-decode-backend",
        "--kv-cache-dtype",
        "--moe-runner-backend",
    ),
    info_paths=("/server_info", "/get_server_info"),
    version_path=None,
    args_log=None,
    process_titles=("sglang::",),
    profile_start="/start_profile",
    profile_stop="/stop_profile",
    failures=(),
    argv=sglang_argv,
    expected=expected,
    cpu_bind_var="SGLANG_CPU_OMP_THREADS_BIND",
    nccl_var="SGLANG_NCCL_SO_PATH",
    checkout_pythonpath="python",
    unbound_ranks="every scheduler asserts 'SGLANG_CPU_OMP_THREADS_BIND is not set'",
    reports={
        "context_length": "context_length",
        "max_running_requests": "max_running_requests",
        "kv_pool": "max_total_tokens",
        "kv_cache_dtype": "kv_cache_dtype",
    },
    kv_dtype_spelling={"bfloat16": "bf16"},
    launch_path_rules=True,
)
