"""sglops stand-in: a synthetic SGLang decode trace for the stand-in server (standard library only).

Why: the stand-in server has no GPU, but `inv profile` must still find, wait for, download
and analyse one Chrome trace per TP rank. This writes a trace shaped like a real SGLang
torch-profiler decode trace (0.5.15+: `step[DECODE bs=1]` spans, no ProfilerStep#; CPU ops
with cudaLaunchKernel runtime events linked to kernels by `correlation` and ac2g flows;
real-looking kernel names). It is NOT real data: the accuracy proof uses real traces.

`whole_pool_cast=True` mimics the FlashInfer-MLA workaround that casts the whole FP8 KV pool
to BF16 every layer; False mimics gather-cast (gather the active rows, cast only those), a much
shorter step. The cast kernel's share of the step is `cast_share`: the stand-in server passes the
one its decode model computed from the served tree's own code (standin_kv_cost.py); without it, a
whole-pool cast takes the seed investigation's 69%. Either way the share is SET BY THE STAND-IN.
"""

from __future__ import annotations

import gzip
import json
import random

LAYERS = 24
# share of decode GPU time the whole-pool cast takes
CAST_SHARE = 0.69
# us, like torch's monotonic clock
BASE_TS = 5_000_000_000_000.0
CPU_PID, GPU_STREAM = 4242, 7

K_GEMM_Q = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_NNT"
K_GEMM_O = "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_NNT"
K_GEMM_UP = "nvjet_sm90_tst_192x8_64x8_4x1_v_bz_splitK_NNT"
K_GEMM_DN = "nvjet_sm90_tst_64x16_64x16_4x1_v_bz_splitK_NNT"
K_CAST = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#3}::operator()()"
    " const::{lambda()#12}::operator()() const::{lambda(c10::Float8_e4m3fn)#1}, std::array<char*, 2ul>, 4,"
    " TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>,"
    " at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, ...)"
)
K_GATHER = (
    "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long,"
    " bool)"
)
K_MLA = (
    "void flashinfer::mla::BatchMLAPagedAttentionKernel<flashinfer::mla::KernelTraits<2u, 64u, 64u, 8u, 512u,"
    " 64u, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int>,"
    " flashinfer::mla::StandardAttention>(flashinfer::mla::MLAParams)"
)
K_ADD = (
    "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
)
K_ALLREDUCE = (
    "void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>(sglang::RankData*, sglang::RankSignals, int)"
)


def _layer_plan(
    whole_pool_cast: bool, tp_size: int, cast_share: float | None = None
) -> list[tuple[tuple[str, ...], str, float]]:
    """One layer: (CPU op chain outer->inner, kernel, GPU us) in launch order."""
    plan: list[tuple[tuple[str, ...], str, float]] = [(("aten::matmul", "aten::mm"), K_GEMM_Q, 8.0)]
    if whole_pool_cast:
        # sized below
        plan.append((("aten::to", "aten::_to_copy", "aten::copy_"), K_CAST, 0.0))
        plan.append((("aten::index",), K_GATHER, 2.0))
    else:
        plan.append((("aten::index",), K_GATHER, 2.2))
        plan.append((("aten::to", "aten::_to_copy", "aten::copy_"), K_CAST, 1.4))
    plan += [
        (("flashinfer::batch_mla_paged_attention_run",), K_MLA, 9.0),
        (("aten::matmul", "aten::mm"), K_GEMM_O, 6.0),
    ]
    if tp_size > 1:
        plan.append((("sgl_kernel::all_reduce",), K_ALLREDUCE, 4.0))
    plan += [
        (("aten::add",), K_ADD, 1.0),
        (("aten::matmul", "aten::mm"), K_GEMM_UP, 11.0),
        (("aten::matmul", "aten::mm"), K_GEMM_DN, 8.0),
        (("aten::add",), K_ADD, 1.0),
    ]
    share = CAST_SHARE if cast_share is None and whole_pool_cast else cast_share
    if share is not None:
        rest = sum(us for _, k, us in plan if k != K_CAST)
        plan = [(ops, k, rest * share / (1 - share) if k == K_CAST else us) for ops, k, us in plan]
    return plan


class _Writer:
    """Streams events into a gzip file as a JSON array, a chunk at a time."""

    def __init__(self, fh, rank: int) -> None:
        self.fh, self.rank, self.buf, self.first = fh, rank, [], True
        self.ext_id, self.corr = 1, 100_000 + rank * 1_000_000

    def add(self, ev: dict) -> None:
        self.buf.append(json.dumps(ev, separators=(",", ":")))
        if len(self.buf) >= 2000:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.fh.write(("" if self.first else ",\n") + ",\n".join(self.buf))
            self.first, self.buf = False, []

    def next_ext(self) -> int:
        self.ext_id += 1
        return self.ext_id


def write_trace(
    path: str, *, rank: int, tp_size: int, steps: int, whole_pool_cast: bool, cast_share: float | None = None
) -> None:
    """Write a gzipped Chrome trace of `steps` decode steps for one TP rank (deterministic)."""
    rnd = random.Random(f"sglops-standin-{rank}-{tp_size}-{steps}-{int(whole_pool_cast)}")
    plan = _layer_plan(whole_pool_cast, tp_size, cast_share)
    meta = {
        "schemaVersion": 1,
        "traceName": (
            f"sglops stand-in SGLang decode trace (TP-{rank} of {tp_size}; synthetic, not real GPU data)"
        ),
        "sglops_standin": True,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": tp_size},
        "deviceProperties": [{"id": rank, "name": "sglops stand-in GPU"}],
        "displayTimeUnit": "ms",
    }
    with (
        open(path, "wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0, compresslevel=6) as gz,
    ):
        import io

        fh = io.TextIOWrapper(gz, encoding="utf-8")
        fh.write(json.dumps(meta)[:-1] + ', "traceEvents": [\n')
        w = _Writer(fh, rank)
        tid, gpid = CPU_PID + rank, rank
        for name, pid, t, args in (
            ("process_name", CPU_PID + rank, 0, {"name": "python3"}),
            ("process_labels", CPU_PID + rank, 0, {"labels": "CPU"}),
            ("process_name", gpid, 0, {"name": "python3"}),
            ("process_labels", gpid, 0, {"labels": f"GPU {rank}"}),
            ("thread_name", gpid, GPU_STREAM, {"name": f"stream {GPU_STREAM} "}),
        ):
            w.add({"name": name, "ph": "M", "ts": BASE_TS, "pid": pid, "tid": t, "args": args})
        cpu = BASE_TS + 50.0
        gpu_free = cpu
        for _ in range(steps):
            step_start = cpu
            step_ext = w.next_ext()
            step_events: list[dict] = []
            # scheduler work before the forward
            cpu += 20.0 + rnd.uniform(0, 5)
            for _ in range(LAYERS):
                for ops, kernel, us in plan:
                    spans = []
                    for depth, op in enumerate(ops):
                        spans.append({"name": op, "ts": cpu, "ext": w.next_ext()})
                        cpu += 1.5 + depth * 0.3 + rnd.uniform(0, 0.4)
                    launch_ts, launch_dur = cpu, 3.0 + rnd.uniform(0, 1.0)
                    cpu += launch_dur + 0.5
                    w.corr += 1
                    inner_ext = spans[-1]["ext"]
                    k_dur = round(us * rnd.uniform(0.97, 1.03), 3)
                    k_ts = max(launch_ts + launch_dur + 1.0, gpu_free + 0.8 + rnd.uniform(0, 0.4))
                    gpu_free = k_ts + k_dur
                    for sp in reversed(spans):
                        cpu += 0.6
                        step_events.append(
                            {
                                "ph": "X",
                                "cat": "cpu_op",
                                "name": sp["name"],
                                "pid": CPU_PID + rank,
                                "tid": tid,
                                "ts": round(sp["ts"], 3),
                                "dur": round(cpu - sp["ts"], 3),
                                "args": {"External id": sp["ext"], "Record function id": 0},
                            }
                        )
                    step_events.append(
                        {
                            "ph": "X",
                            "cat": "cuda_runtime",
                            "name": "cudaLaunchKernel",
                            "pid": CPU_PID + rank,
                            "tid": tid,
                            "ts": round(launch_ts, 3),
                            "dur": round(launch_dur, 3),
                            "args": {"External id": inner_ext, "cbid": 211, "correlation": w.corr},
                        }
                    )
                    step_events.append(
                        {
                            "ph": "s",
                            "id": w.corr,
                            "pid": CPU_PID + rank,
                            "tid": tid,
                            "ts": round(launch_ts, 3),
                            "cat": "ac2g",
                            "name": "ac2g",
                        }
                    )
                    step_events.append(
                        {
                            "ph": "X",
                            "cat": "kernel",
                            "name": kernel,
                            "pid": gpid,
                            "tid": GPU_STREAM,
                            "ts": round(k_ts, 3),
                            "dur": k_dur,
                            "args": {
                                "External id": inner_ext,
                                "device": rank,
                                "stream": GPU_STREAM,
                                "correlation": w.corr,
                                "grid": [132, 1, 1],
                                "block": [128, 1, 1],
                            },
                        }
                    )
                    step_events.append(
                        {
                            "ph": "f",
                            "id": w.corr,
                            "pid": gpid,
                            "tid": GPU_STREAM,
                            "ts": round(k_ts, 3),
                            "cat": "ac2g",
                            "name": "ac2g",
                            "bp": "e",
                        }
                    )
            # the step ends when the scheduler has the sampled token: wait for the GPU
            sync_ts = cpu
            cpu = max(cpu, gpu_free) + 3.0
            step_events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaStreamSynchronize",
                    "pid": CPU_PID + rank,
                    "tid": tid,
                    "ts": round(sync_ts, 3),
                    "dur": round(cpu - sync_ts, 3),
                    "args": {"correlation": 0},
                }
            )
            cpu += 5.0
            w.add(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": "step[DECODE bs=1]",
                    "pid": CPU_PID + rank,
                    "tid": tid,
                    "ts": round(step_start, 3),
                    "dur": round(cpu - step_start, 3),
                    "args": {"External id": step_ext, "Record function id": 0},
                }
            )
            for ev in step_events:
                w.add(ev)
            w.flush()
            # scheduler between steps: GPU idle
            cpu += 30.0 + rnd.uniform(0, 10)
            gpu_free = max(gpu_free, cpu)
        w.flush()
        fh.write("\n]}\n")
        fh.flush()
        fh.detach()
