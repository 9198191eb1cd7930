#!/usr/bin/env python3
"""STAND-IN for `python -m sglang.launch_server` (no GPU): for sglops tests and the demo only.

It accepts launch_server's arguments and speaks the part of SGLang's HTTP API that sglops
uses (/health, /get_server_info, /generate, /v1/completions, /v1/chat/completions, /detokenize,
/start_profile, /stop_profile),
with exactly paced decode so benchmarks measure what the stand-in was told to produce.
Standard library only: it runs under a bare host's /usr/bin/python3.

Launch arguments stay SGLang's; the stand-in's own knobs are environment variables:
  SGLOPS_STANDIN_TPS            decode tok/s (default: a model run on the served tree's own decode KV code,
                                standin_kv_cost.py; every figure it sets is the stand-in's, not a measurement)
  SGLOPS_STANDIN_SPEEDUP        multiplies the rate (the demo keeps ratios but runs fast)
  SGLOPS_STANDIN_TTFT_MS        time to first token (default 30)
  SGLOPS_STANDIN_STARTUP_S      loading time before /health is 200 (default 0.3)
  SGLOPS_STANDIN_FAIL           static_assert | oom | traceback | unsupported_backend: crash in warm-up
  SGLOPS_STANDIN_DROP_AFTER     drop every stream after N tokens
  SGLOPS_STANDIN_STREAM_INTERVAL tokens per streamed chunk (default 1)
  SGLOPS_STANDIN_PROFILER=off   accept profiling but never write trace files
  SGLOPS_STANDIN_IGNORE_TERM=1  ignore SIGTERM (to exercise a stopper's KILL fallback)
  SGLOPS_STANDIN_DIVERGE_AT     from this output token on, every token id is another one (a patch that changes
                                results, for the identity checks)
  SGLOPS_STANDIN_LOGPROB_NOISE  added to every logprob (a kernel that is not bitwise deterministic)
Outputs are a pure function of the prompt ids (token k = (sum of prompt ids + k) mod 10), with made-up
logprobs: deterministic, so two runs of the same prompts answer the same; never a model's output.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
# the backends whose decode KV code the stand-in runs (None: the default)
MLA_BACKENDS = ("flashinfer", None)
# SGLang logs "gen throughput" every 40 decode steps
GEN_LOG_EVERY = 40
# token ids the stand-in accepts in input_ids (it counts them, it does not embed them)
STANDIN_VOCAB = 32000
VOCAB = ["the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", "."]


def log(msg: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stdout.write(f"[{stamp}] {msg}\n")
    sys.stdout.flush()


# -- arguments -------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    """launch_server's arguments that matter to sglops, under SGLang's names; the rest go to extra_args."""
    p = argparse.ArgumentParser(prog="sglang.launch_server (sglops stand-in)", allow_abbrev=False)
    a = p.add_argument
    a("--model-path", "--model", dest="model_path", default=None)
    a("--tokenizer-path", default=None)
    a("--served-model-name", default=None)
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--tp-size", "--tp", dest="tp_size", type=int, default=1)
    a("--dp-size", "--dp", dest="dp_size", type=int, default=1)
    a("--ep-size", "--ep", dest="ep_size", type=int, default=1)
    a("--pp-size", dest="pp_size", type=int, default=1)
    a("--attention-backend", default=None)
    a("--prefill-attention-backend", default=None)
    a("--decode-attention-backend", default=None)
    for stage in ("prefill", "decode"):
        a(f"--nsa-{stage}-backend", default=None)
        a(f"--dsa-{stage}-backend", default=None)
    a("--kv-cache-dtype", default="auto")
    a("--dtype", default="auto")
    a("--quantization", default=None)
    a("--mem-fraction-static", type=float, default=None)
    a("--context-length", type=int, default=None)
    a("--max-running-requests", type=int, default=None)
    a("--chunked-prefill-size", type=int, default=None)
    a("--page-size", type=int, default=None)
    a("--disable-cuda-graph", action="store_true")
    a("--cuda-graph-max-bs", type=int, default=None)
    a("--cuda-graph-bs", type=int, nargs="+", default=None)
    for stage in ("decode", "prefill"):
        a(f"--cuda-graph-backend-{stage}", default=None)
        a(f"--cuda-graph-max-bs-{stage}", type=int, default=None)
    a("--moe-runner-backend", default=None)
    a("--nnodes", type=int, default=1)
    a("--node-rank", type=int, default=0)
    a("--dist-init-addr", default=None)
    a("--trust-remote-code", action="store_true")
    a("--enable-metrics", action="store_true")
    a("--enable-cache-report", action="store_true")
    a("--enable-dp-attention", action="store_true")
    a("--log-level", default="info")
    a("--random-seed", type=int, default=None)
    return p


def parse(argv: list[str]) -> tuple[dict, list[str]]:
    ns, extra = parser().parse_known_args(argv)
    args = vars(ns)
    args["served_model_name"] = args["served_model_name"] or args["model_path"]
    args["tokenizer_path"] = args["tokenizer_path"] or args["model_path"]
    return args, extra


# -- what the served tree says -----------------------------------------------------------------
def served_tree() -> str | None:
    """The sglang package folder the launch script put on PYTHONPATH (found, not imported)."""
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def tree_version(pkg: str | None) -> str | None:
    import re

    if not pkg:
        return None
    for name in ("_version.py", "version.py"):
        m = re.search(
            r"^(?:__version__|version)\s*(?::\s*str)?\s*=\s*(?:\w+\s*=\s*)*['\"]([^'\"]+)['\"]",
            _read(os.path.join(pkg, name)),
            re.M,
        )
        if m:
            return m.group(1)
    return None


def decode_model(pkg: str | None, backend: str | None) -> dict:
    """The stand-in's decode step: for FlashInfer MLA, its model run on the served tree's decode KV code
    (standin_kv_cost.py; raises ServedCodeError where that code breaks, as a real warm-up would); else, and
    with no tree, the seed's rate. SGLOPS_STANDIN_TPS overrides
    the rate; every figure here is SET BY THE STAND-IN."""
    if HERE not in sys.path:
        sys.path.append(HERE)
    import standin_kv_cost as kv

    if pkg and backend in MLA_BACKENDS:
        model = kv.step_model(pkg)
    else:
        model = {
            "rate": kv.SEED_RATE,
            "cast_share": kv.SEED_CAST_SHARE,
            "whole_pool_cast": True,
            "set_by": "stand-in constant (the seed's rate)",
        }
    env = os.environ.get("SGLOPS_STANDIN_TPS")
    if env:
        model = {**model, "rate": float(env), "set_by": "SGLOPS_STANDIN_TPS"}
    return {**model, "rate": model["rate"] * float(os.environ.get("SGLOPS_STANDIN_SPEEDUP") or 1)}


# -- warm-up crashes (what real logs look like) ----------------------------------------------------
def crash_log(kind: str, args: dict) -> str:
    backend = args.get("attention_backend") or "flashinfer"
    if kind == "static_assert":
        return (
            "[2026-01-01 00:00:05 TP0] Capture cuda graph begin. This can take up to several"
            " minutes.\n/root/.cache/flashinfer/generated/"
            "batch_mla_attention/include/flashinfer/mma.cuh(523):"
            ' error: static assertion failed with "sizeof(DType) == 2"\n    static_assert(sizeof(DType) =='
            ' 2);\n          detected during instantiation of "void'
            ' flashinfer::mma::m16k16_rowsum_f16f16f32<DType>(float *, DType *) [with DType=__nv_fp8_e4m3]"'
            " at line 511 of attention/mla.cuh\n1 error detected in the compilation of"
            ' "batch_mla_attention.cu".\nninja: build stopped: subcommand failed.\nRuntimeError: Ninja build'
            " failed (FlashInfer JIT: batch_mla_attention_dtype_q_bf16_dtype_kv_e4m3)\n[2026-01-01 00:00:07]"
            " Received sigquit from a child process. It usually means the child failed.\n"
        )
    if kind == "oom":
        return (
            "[2026-01-01 00:00:05 TP0] Capture cuda graph begin. This can take up to several"
            " minutes.\nTraceback (most recent call last):\n  File"
            ' "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 412, in'
            " capture\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a"
            " total capacity of 94.97 GiB of which 1.12 GiB is free. Of the allocated memory 90.10 GiB is"
            " allocated by PyTorch.\n[2026-01-01 00:00:07] Received sigquit from a child process. It usually"
            " means the child failed.\n"
        )
    if kind == "unsupported_backend":
        return (
            "Traceback (most recent call last):\n"
            '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1802, '
            "in _get_attention_backend_from_str\n"
            f"ValueError: Invalid attention backend: {backend} is not supported for this model "
            "(MLA with kv_cache_dtype="
            + str(args.get("kv_cache_dtype"))
            + ")\n[2026-01-01 00:00:07] Received sigquit from a child process. It usually means the child"
            " failed.\n"
        )
    return (
        "[2026-01-01 00:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):\n  File"
        ' "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2961, in'
        " run_scheduler_process\n    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank,"
        " moe_ep_rank, pp_rank, dp_rank)\n  File"
        ' "/sgl-workspace/sglang/python/sglang/srt/models/deepseek_v2.py", line 1288, in forward\n   '
        " q_nope_out = torch.bmm(q_nope.transpose(0, 1), self.w_kc)\nRuntimeError: expected mat1 and mat2 to"
        " have the same dtype, but got: c10::BFloat16 != c10::Float8_e4m3fn\n[2026-01-01 00:00:07] Received"
        " sigquit from a child process. It usually means the child failed.\n"
    )


# -- the server's state ---------------------------------------------------------------------------
class State:
    """Everything the handlers share: args, readiness, decode steps and the profiler."""

    def __init__(self, args: dict, extra: list[str], pkg: str | None) -> None:
        self.args, self.extra, self.pkg = args, extra, pkg
        self.version = tree_version(pkg)
        self.model = decode_model(pkg, args.get("attention_backend"))
        self.rate = self.model["rate"]
        self.ttft = float(os.environ.get("SGLOPS_STANDIN_TTFT_MS") or 30) / 1000
        self.interval = max(1, int(os.environ.get("SGLOPS_STANDIN_STREAM_INTERVAL") or 1))
        drop = os.environ.get("SGLOPS_STANDIN_DROP_AFTER")
        self.drop_after = int(drop) if drop else None
        self.profiler_on = (os.environ.get("SGLOPS_STANDIN_PROFILER") or "on").lower() != "off"
        self.ready = False
        self.lock = threading.Lock()
        self.decode_steps = 0
        self.last_gen_throughput = 0.0
        self._window_start = time.monotonic()
        self.profile: dict | None = None
        diverge = os.environ.get("SGLOPS_STANDIN_DIVERGE_AT")
        self.diverge_at = int(diverge) if diverge else None
        self.logprob_noise = float(os.environ.get("SGLOPS_STANDIN_LOGPROB_NOISE") or 0)
        self.cache = StandinCache()

    def token(self, seed: int, k: int) -> tuple[int, float]:
        """The stand-in's k-th output token of a prompt (seed: the sum of its ids) and a made-up logprob."""
        tid = (seed + k) % len(VOCAB)
        if self.diverge_at is not None and k >= self.diverge_at:
            tid = (tid + 1) % len(VOCAB)
        return tid, -0.25 - ((seed * 31 + k * 17) % 97) / 64 + self.logprob_noise

    def server_info(self) -> dict:
        return {
            **self.args,
            "version": self.version,
            "standin": True,
            "sglang_tree": self.pkg,
            "last_gen_throughput": self.last_gen_throughput,
            "extra_args": list(self.extra),
            "standin_decode_tps": self.rate,
            "standin_decode_model": self.model,
        }

    def decode_step(self) -> None:
        """Count one decode step: gen-throughput log every 40, auto-stop a num_steps profile."""
        finish = None
        with self.lock:
            self.decode_steps += 1
            if self.decode_steps % GEN_LOG_EVERY == 0:
                now = time.monotonic()
                self.last_gen_throughput = round(GEN_LOG_EVERY / max(now - self._window_start, 1e-9), 2)
                self._window_start = now
                log(
                    f"Decode batch. #running-req: 1, #token: {self.decode_steps}, token usage: 0.00, "
                    f"gen throughput (token/s): {self.last_gen_throughput:.2f}, #queue-req: 0"
                )
            if self.profile is not None:
                self.profile["steps"] += 1
                want = self.profile.get("num_steps")
                if want and self.profile["steps"] >= want:
                    finish, self.profile = self.profile, None
        if finish:
            threading.Thread(target=write_traces, args=(self, finish), daemon=True).start()


def trace_name(prof: dict, rank: int) -> str:
    prefix = prof.get("profile_prefix")
    return (f"{prefix}-" if prefix else "") + f"{prof['profile_id']}-TP-{rank}.trace.json.gz"


def write_traces(state: State, prof: dict) -> None:
    """One trace per TP rank, written straight to its final name in chunks over ~0.2 s, like torch."""
    if not state.profiler_on:
        log("Profiling done (SGLOPS_STANDIN_PROFILER=off: no trace written)")
        return
    if HERE not in sys.path:
        sys.path.append(HERE)
    try:
        from standin_trace import write_trace
    # the trace helper is missing or broken: say so, write nothing
    except Exception as exc:
        log(
            f"stand-in profiler: cannot import standin_trace.write_trace ({type(exc).__name__}: {exc}); no"
            " trace"
        )
        return
    tp = int(state.args.get("tp_size") or 1)
    out_dir = prof["output_dir"]
    os.makedirs(out_dir, exist_ok=True)
    for rank in range(tp):
        final = os.path.join(out_dir, trace_name(prof, rank))
        scratch = tempfile.mkdtemp(prefix="sglops-standin-trace-")
        try:
            tmp = os.path.join(scratch, "trace.json.gz")
            write_trace(
                tmp,
                rank=rank,
                tp_size=tp,
                steps=max(1, prof["steps"]),
                whole_pool_cast=state.model["whole_pool_cast"],
                cast_share=state.model["cast_share"],
            )
            with open(tmp, "rb") as fh:
                data = fh.read()
            pieces = 5
            size = max(1, -(-len(data) // pieces))
            with open(final, "wb") as out:
                for i in range(0, len(data), size):
                    out.write(data[i : i + size])
                    out.flush()
                    time.sleep(0.2 / pieces / tp)
        except Exception:
            log("stand-in profiler: trace writing failed\n" + traceback.format_exc())
        finally:
            for name in os.listdir(scratch):
                os.unlink(os.path.join(scratch, name))
            os.rmdir(scratch)
        log(f"Profiling done. Traces are saved to: {final}")


# -- HTTP ----------------------------------------------------------------------------------------
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sglang-standin"
    # set on the class at start-up
    state: State

    # SGLang's uvicorn access log, one line
    def log_message(self, fmt, *args):
        log(
            f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.requestline}"'
            f" {args[1] if len(args) > 1 else ''}"
        )

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # helpers
    def _json(self, code: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _text(self, code: int, text: str) -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw.strip():
            return {}
        return json.loads(raw)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    # routes
    def do_GET(self):
        st = self.state
        path = self.path.split("?")[0]
        if path in ("/health", "/health_generate"):
            return self._text(200, "") if st.ready else self._text(503, "Server is loading")
        if path in ("/get_server_info", "/server_info"):
            return self._json(200, st.server_info())
        if path in ("/get_model_info", "/model_info"):
            # vocab_size: real SGLang does not report it (bench reads the model's config.json); the stand-in,
            # with no model files, says what ids it takes
            return self._json(
                200, {"model_path": st.args["model_path"], "is_generation": True, "vocab_size": STANDIN_VOCAB}
            )
        if path == "/v1/models":
            return self._json(
                200, {"object": "list", "data": [{"id": st.args["served_model_name"], "object": "model"}]}
            )
        return self._json(404, {"detail": "Not Found"})

    def do_POST(self):
        st = self.state
        path = self.path.split("?")[0]
        try:
            body = self._body()
        except ValueError as exc:
            return self._json(400, {"error": {"message": f"invalid JSON body: {exc}"}})
        if path == "/start_profile":
            return self._start_profile(body)
        if path == "/stop_profile":
            return self._stop_profile()
        if not st.ready:
            return self._json(503, {"error": {"message": "Server is loading"}})
        if path == "/generate":
            return self._generate(body)
        if path in ("/v1/completions",):
            return self._completions(body)
        if path in ("/v1/chat/completions",):
            return self._chat(body)
        if path in ("/detokenize", "/v1/detokenize"):
            return self._json(200, {"text": standin_text(body.get("tokens") or [])})
        return self._json(404, {"detail": "Not Found"})

    # profiler
    def _start_profile(self, body: dict):
        st = self.state
        with st.lock:
            if st.profile is not None:
                return self._text(400, "Profiling is already in progress. Call /stop_profile first.")
            out = body.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR") or "/tmp"
            st.profile = {
                "output_dir": out,
                "num_steps": body.get("num_steps"),
                "steps": 0,
                "profile_id": str(body.get("profile_id") or time.time()),
                "profile_prefix": body.get("profile_prefix"),
                "activities": body.get("activities") or ["CPU", "GPU"],
                "with_stack": body.get("with_stack"),
                "record_shapes": body.get("record_shapes"),
                "profile_by_stage": bool(body.get("profile_by_stage")),
            }
        log(f"Profiling starts. Traces will be saved to: {out} (with profile id: {st.profile['profile_id']})")
        return self._text(200, "Start profiling.\n")

    def _stop_profile(self):
        st = self.state
        with st.lock:
            prof, st.profile = st.profile, None
        if prof is None:
            return self._text(400, "Profiling is not in progress. Call /start_profile first.")
        threading.Thread(target=write_traces, args=(st, prof), daemon=True).start()
        return self._text(200, "Stop profiling. This will take some time.\n")

    # generation
    def _tokens(self, prompt) -> int:
        if isinstance(prompt, list):
            return len(prompt)
        return max(1, len(str(prompt or "").split()))

    @staticmethod
    def _seed(prompt) -> int:
        """What a stand-in output depends on: the prompt's ids (or its text)."""
        if isinstance(prompt, list):
            return sum(int(x) for x in prompt if isinstance(x, int))
        return sum(map(ord, str(prompt or "")))

    def _paced(self, n: int):
        """Yield token indices at t_first + k/rate on absolute monotonic deadlines (no drift).

        t_first is when the first token actually went out (the caller has written it when the
        generator resumes), so a late first token delays the rest instead of being caught up.
        """
        st = self.state
        wait = st.ttft
        if wait > 0:
            time.sleep(wait)
        if n < 1:
            return
        yield 0
        t_first = time.monotonic()
        for k in range(1, n):
            wait = t_first + k / st.rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            st.decode_step()
            yield k

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _drop(self) -> None:
        log("stand-in: dropping the stream (SGLOPS_STANDIN_DROP_AFTER)")
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _generate(self, body: dict):
        st = self.state
        sp = body.get("sampling_params") or {}
        n = int(sp.get("max_new_tokens") or 128)
        prompt = body.get("input_ids") if body.get("input_ids") is not None else body.get("text", "")
        ptoks = self._tokens(prompt)
        seed = self._seed(prompt)
        want_lp = bool(body.get("return_logprob"))
        rid = body.get("rid") or uuid.uuid4().hex
        start = time.monotonic()
        ids: list[int] = []
        text = ""

        def meta(done: bool) -> dict:
            return {
                "id": rid,
                "prompt_tokens": ptoks,
                "completion_tokens": len(ids),
                "finish_reason": {"type": "length", "length": n} if done else None,
                "e2e_latency": round(time.monotonic() - start, 6),
            }

        if not body.get("stream"):
            lps = []
            for k in self._paced(n):
                tid, lp = st.token(seed, k)
                ids.append(tid)
                lps.append([lp, tid, None])
                text += VOCAB[tid]
            info = meta(True)
            if want_lp:
                info.update(input_token_logprobs=[], output_token_logprobs=lps)
            return self._json(200, {"text": text, "output_ids": ids, "meta_info": info})
        self._start_stream()
        # Cumulative text and ids, as SGLang streams them: serialized incrementally so a chunk costs
        # a copy, not a re-encode of everything so far (keeps pacing exact at thousands of tok/s).
        text_esc, ids_esc, lp_esc = [], [], []
        for k in self._paced(n):
            tid, lp = st.token(seed, k)
            ids.append(tid)
            text_esc.append(json.dumps(VOCAB[tid])[1:-1])
            ids_esc.append(str(tid))
            if want_lp:
                lp_esc.append(f"[{lp!r}, {tid}, null]")
            dropping = st.drop_after is not None and len(ids) >= st.drop_after
            if len(ids) % st.interval == 0 or k == n - 1 or dropping:
                text_esc[:] = ["".join(text_esc)]
                ids_esc[:] = [", ".join(ids_esc)]
                info = json.dumps(meta(k == n - 1 and not dropping))
                # SGLang's layout: [logprob, token id, text or null] per token, cumulative
                if want_lp:
                    lp_esc[:] = [", ".join(lp_esc)]
                    info = (
                        info[:-1]
                        + ', "input_token_logprobs": [], "output_token_logprobs": ['
                        + lp_esc[0]
                        + "]}"
                    )
                out = (
                    'data: {"text": "'
                    + text_esc[0]
                    + '", "output_ids": ['
                    + ids_esc[0]
                    + '], "meta_info": '
                    + info
                    + "}\n\n"
                )
                self._chunk(out.encode())
            if dropping:
                return self._drop()
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _completions(self, body: dict):
        st = self.state
        n = int(body.get("max_tokens") or 16)
        ptoks = self._tokens(body.get("prompt"))
        cid = "cmpl-" + uuid.uuid4().hex
        model = body.get("model") or st.args["served_model_name"]
        usage = {"prompt_tokens": ptoks, "completion_tokens": n, "total_tokens": ptoks + n}
        seed = self._seed(body.get("prompt"))
        want_lp = body.get("logprobs") is not None
        want_ids = bool(body.get("return_token_ids"))
        if not body.get("stream"):
            text = "".join(VOCAB[st.token(seed, k)[0]] for k in self._paced(n))
            return self._json(
                200,
                {
                    "id": cid,
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                    "usage": usage,
                },
            )
        self._start_stream()
        pending = ""
        sent = 0
        p_ids: list[int] = []
        p_lps: list[float] = []
        for k in self._paced(n):
            tid, lp = st.token(seed, k)
            pending += VOCAB[tid]
            p_ids.append(tid)
            p_lps.append(lp)
            dropping = st.drop_after is not None and k + 1 >= st.drop_after
            if (k + 1) % st.interval == 0 or k == n - 1 or dropping:
                sent = k + 1
                choice = {
                    "index": 0,
                    "text": pending,
                    "logprobs": None,
                    "finish_reason": "length" if k == n - 1 else None,
                }
                # SGLang's /v1/completions layout with logprobs=0
                if want_lp:
                    choice["logprobs"] = {
                        "text_offset": [-1] * len(p_ids),
                        "token_logprobs": p_lps,
                        "tokens": [VOCAB[i] for i in p_ids],
                        "top_logprobs": [],
                    }
                if want_ids:
                    choice["token_ids"] = p_ids
                chunk = {
                    "id": cid,
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [choice],
                }
                self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                pending, p_ids, p_lps = "", [], []
            if dropping:
                return self._drop()
        if (body.get("stream_options") or {}).get("include_usage"):
            usage["completion_tokens"] = sent
            usage["total_tokens"] = ptoks + sent
            last = {
                "id": cid,
                "object": "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [],
                "usage": usage,
            }
            self._chunk(b"data: " + json.dumps(last).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _chat(self, body: dict):
        """A streamed chat completion in SGLang's layout: a role chunk, one delta per token (usage in each
        with continuous_usage_stats), the usage chunk, SGLang's `sglext` output ids when asked. The prompt is
        the messages' contents joined by newlines (the stand-in's own template); its cached tokens are the
        stand-in's prefix cache (StandinCache), in usage only with --enable-cache-report (as SGLang), in
        `sglext` when asked."""
        st = self.state
        messages = body.get("messages") or []
        prompt = "\n".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))
        words = prompt.split()
        ptoks, cached = max(1, len(words)), st.cache.hit(words)
        n = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        cid, seed = "chatcmpl-" + uuid.uuid4().hex, self._seed(prompt)
        model = body.get("model") or st.args["served_model_name"]
        options = body.get("stream_options") or {}
        want_lp = bool(body.get("logprobs"))

        def usage(k: int) -> dict:
            out = {"prompt_tokens": ptoks, "completion_tokens": k, "total_tokens": ptoks + k}
            if st.args.get("enable_cache_report"):
                out["prompt_tokens_details"] = {"cached_tokens": cached}
            return out

        def send(choices: list, **extra) -> None:
            chunk = {
                "id": cid,
                "object": "chat.completion.chunk",
                "model": model,
                "choices": choices,
                **extra,
            }
            self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        self._start_stream()
        send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        ids: list[int] = []
        for k in self._paced(n):
            tid, lp = st.token(seed, k)
            ids.append(tid)
            choice = {
                "index": 0,
                "delta": {"content": VOCAB[tid]},
                "logprobs": {"content": [{"token": VOCAB[tid], "logprob": lp, "top_logprobs": []}]}
                if want_lp
                else None,
                "finish_reason": "length" if k == n - 1 else None,
            }
            send([choice], **({"usage": usage(k + 1)} if options.get("continuous_usage_stats") else {}))
        if options.get("include_usage"):
            send([], usage=usage(len(ids)))
        ext = {"output_ids": [ids]} if body.get("return_output_ids_in_sglext") else {}
        if body.get("return_cached_tokens_details"):
            ext["cached_tokens_details"] = {"device": cached, "host": 0}
        if ext:
            send([], sglext=ext)
        st.cache.add(words)
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")


def standin_text(ids: list) -> str:
    """The stand-in's text of token ids: one word per id (its chat prompts count a word a token)."""
    return " ".join(f"w{int(i)}" for i in ids if isinstance(i, int))


class StandinCache:
    """The stand-in's prefix cache of chat prompts (words): a prompt's cached tokens are its longest common
    prefix with one seen before, as a radix cache serves a conversation's earlier turns."""

    MOST = 4096

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[list[str]] = []

    def hit(self, words: list[str]) -> int:
        with self.lock:
            return max((_common(words, old) for old in self.seen), default=0)

    def add(self, words: list[str]) -> None:
        with self.lock:
            self.seen = (self.seen + [words])[-self.MOST :]


def _common(a: list[str], b: list[str]) -> int:
    n, most = 0, min(len(a), len(b))
    while n < most and a[n] == b[n]:
        n += 1
    return n


# -- start-up ------------------------------------------------------------------------------------
# uvicorn's default; socketserver's 5 reset connections above ~250 new ones per second
LISTEN_BACKLOG = 2048


class StandinHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with a server's listen backlog, so bursts of new connections queue, not reset."""

    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True


def main(argv: list[str] | None = None) -> int:
    args, extra = parse(sys.argv[1:] if argv is None else argv)
    pkg = served_tree()
    try:
        state = State(args, extra, pkg)
    # standin_kv_cost.ServedCodeError: the served decode code breaks, as at warm-up
    except RuntimeError as exc:
        sys.stderr.write(
            "[stand-in] Scheduler hit an exception: Traceback (most recent call last):\n"
            f"RuntimeError: {exc}\n"
            "Received sigquit from a child process. It usually means the child failed.\n"
        )
        return 1
    if os.environ.get("SGLOPS_STANDIN_IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log("sglops STAND-IN for sglang.launch_server (no GPU; tests and demo only)")
    log("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")")
    if extra:
        log(f"unrecognized arguments kept as extra_args: {extra}")
    log(
        f"served SGLang tree: {pkg or 'not found'} (version {state.version}); decode {state.rate:g} tok/s, "
        f"set by the stand-in ({state.model['set_by']}; whole-pool cast: {state.model['whole_pool_cast']})"
    )
    Handler.state = state
    try:
        httpd = StandinHTTPServer((args["host"], args["port"]), Handler)
    except OSError as exc:
        log(
            f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
            f"('{args['host']}', {args['port']}): {(exc.strerror or str(exc)).lower()}"
        )
        sys.stderr.write(
            f"OSError: [Errno {exc.errno}] {exc.strerror}: port {args['port']} is already in use\n"
            if exc.errno == 98
            else f"OSError: {exc}\n"
        )
        return 1
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    log(f"Load weight begin. (stand-in loading for {os.environ.get('SGLOPS_STANDIN_STARTUP_S') or 0.3} s)")
    time.sleep(float(os.environ.get("SGLOPS_STANDIN_STARTUP_S") or 0.3))
    fail = os.environ.get("SGLOPS_STANDIN_FAIL")
    if fail:
        sys.stderr.write(crash_log(fail, args))
        sys.stderr.flush()
        httpd.server_close()
        return 1
    state.ready = True
    log(f"INFO:     Uvicorn running on http://{args['host']}:{args['port']} (Press CTRL+C to quit)")
    log("The server is fired up and ready to roll!")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
