# validated against sglang 0.5.17 on local
warning: flashinfer MLA with an FP8 KV cache casts the whole KV pool every decode step in this tree (and its FA2 kernels static_assert on FP8 off SM90): consider the gather-cast patch or --attention-backend trtllm_mla
#!/usr/bin/env bash
# SGLang launch script rendered by sglops: re-render and restart rather than edit.
# profile: h200-tiny-mla-fp8   host: local   sglang: 0.5.17
# Every value below is shell-quoted; nothing in it is evaluated by the shell.
set -euo pipefail
export FLASHINFER_WORKSPACE_BASE=/tmp/gpu-tier/flashinfer-jit
export HF_HUB_OFFLINE=1
export NCCL_NVLS_ENABLE=0
export NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=/tmp/gpu-tier/site:/tmp/gpu-tier/tools:/work/main
export SGLANG_TORCH_PROFILER_DIR=/tmp/gpu-tier/traces
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export TRANSFORMERS_OFFLINE=1
exec \
  /opt/torch/.venv/bin/python3 -m sglang.launch_server \
  --model-path /tmp/gpu-tier/tiny-mla \
  --host 127.0.0.1 \
  --port 30000 \
  --attention-backend flashinfer \
  --kv-cache-dtype fp8_e4m3 \
  --mem-fraction-static 0.8 \
  --max-running-requests 16 \
  --max-total-tokens 1048576 \
  --cuda-graph-max-bs 8 \
  --load-format dummy
