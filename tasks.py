"""sglops tasks: `inv --list`. Each task parses flags and calls the sglops library; no logic here."""

from invoke import task

from sglops.core import cli, values
from sglops.core.cli import Targets


# -- foundation -----------------------------------------------------------------------------
@task(help=cli.help_with())
def facts(c, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None, json=False):
    """What is on the host: GPUs, compute capability, driver/CUDA, Python, torch, FlashInfer, SGLang."""
    from sglops.probe.facts import gather

    cli.per_host("facts", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container), gather,
                 json=json, artifact="facts.json")


@task(help={"hosts": "number of sandbox hosts", "base": "folder for the sandbox (default .cache/sandbox)",
            "real": "add host cpu-a with the real SGLang 0.5.23 CPU server environment (scripts/setup.sh builds it)"})
def sandbox(c, action, hosts=None, base=None, real=False):
    """Bring local sandbox GPU hosts up or down (real sshd on loopback, real SGLang trees): up|down|status."""
    from sglops.sandbox import cli as sandbox_cli

    opts = cli.checked(values.SANDBOX | {"action": values.Choice(("up", "down", "status"))}, hosts=hosts, action=action)
    cli.guarded(sandbox_cli.main, opts["action"], hosts=opts["hosts"], base=base, real=real)


@task(help={"keep": "leave the sandbox running afterwards"})
def demo(c, keep=False):
    """The README's main job: a local sandbox GPU host, the fp8-kv-decode investigation end to end, torn down."""
    from sglops.play.demo import run_demo

    code = cli.guarded(run_demo, keep=keep)
    if code:
        cli.fail("demo failed", code)


# -- patches ------------------------------------------------------------------------------
_PATCH_HELP = cli.help_with(dry_run="show the diff and the files it would touch; change nothing",
                            force="override: hand-modified files, unmet requirements, drift")


@task(help=_PATCH_HELP | {"variant": "use this variant (default: by version/commit, else the one that applies)"})
def apply_patch(c, name, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None,
                dry_run=False, variant=None, force=False, json=False):
    """Apply patches/NAME to the host's SGLang tree: atomic, recorded in the host's ledger, idempotent."""
    from sglops.patch import apply as patches
    from sglops.patch import spec as patch_spec

    cli.guarded(patch_spec.load, cli.checked(values.PATCH_NAME, name=name)["name"])
    cli.per_host("apply-patch", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container),
                 lambda r: patches.apply_patch(r, name, dry_run=dry_run, variant=variant, force=force),
                 json=json, artifact="patch.json")


@task(help=_PATCH_HELP)
def revert_patch(c, name, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None,
                 dry_run=False, force=False, json=False):
    """Take patches/NAME back off the host, only if its files are as the patch left them (else --force)."""
    from sglops.patch import apply as patches
    from sglops.patch import spec as patch_spec

    cli.guarded(patch_spec.load, cli.checked(values.PATCH_NAME, name=name)["name"])
    cli.per_host("revert-patch", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container),
                 lambda r: patches.revert_patch(r, name, dry_run=dry_run, force=force),
                 json=json, artifact="patch.json")


@task(name="patches", help=cli.help_with())
def patches_(c, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None, json=False):
    """Each patch on the host: available / applicable / applied / conflicting / drifted."""
    from sglops.patch import apply as patches

    cli.per_host("patches", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container), patches.status,
                 json=json)


@task(help={k: v for k, v in _PATCH_HELP.items() if k not in ("hosts", "tag")} | {
    "against": "commit (git HEAD) or release (the PyPI wheel)",
                          "variant": "variant name (default sglang-VERSION[-local])",
                          "files": "only these files (comma-separated, relative to the checkout)"})
def capture_patch(c, name, host=None, sglang_root=None, accept_new_host_key=False, container=None, against="commit",
                  variant=None, files=None, dry_run=False, force=False, json=False):
    """Turn hand edits on the host into a new variant under patches/NAME/ with its patch.yaml entry."""
    from sglops.patch.capture import capture

    cli.checked(values.PATCH_NAME | values.CAPTURE, name=name, against=against, variant=variant, files=files)
    cli.per_host("capture-patch", Targets(host, None, None, sglang_root, accept_new_host_key, container),
                 lambda r: capture(r, name, against=against, variant=variant, dry_run=dry_run, force=force,
                                   files=files.split(",") if files else None), json=json)


# -- probes -----------------------------------------------------------------------------------
@task(help=cli.help_with(probes="probe file (default playbooks/probes.yaml)", show_hits="list every hit as file:line:text",
                         engine="auto (rg if the host has it), rg, or python (stdlib scanner)"))
def probe_backends(c, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None, json=False,
                   probes=None, show_hits=False, engine="auto"):
    """Which attention backends take FP8 KV, cast the whole pool, guard on arch, do NSA/DSA; FlashInfer MLA FP8."""
    from sglops.probe.scan import scan
    from sglops.probe.spec import ENGINES, load_probe_set
    from sglops.views.show import show

    engine = cli.checked({"engine": values.Choice(tuple(sorted(ENGINES)))}, engine=engine)["engine"]
    probe_set = cli.guarded(load_probe_set, probes)
    cli.per_host("probe-backends", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container),
                 lambda r: scan(r, probe_set, engine=engine), json=json, artifact="probe.json",
                 show=lambda rep: show(rep, show_hits=show_hits))


# -- profile ----------------------------------------------------------------------------------
@task(help={"files": "trace files: comma-separated, a folder, or a quoted glob (plain or .gz Chrome traces)",
            "out": "folder for analysis.json, report.md (and the chart) (default artifacts/local/<run-id>/)",
            "json": "print machine-readable JSON instead of tables (writes analysis.json only)",
            "chart": "also draw a PNG bar chart (top kernels, or top CPU ops on a CPU-only trace)"})
def analyze_trace(c, files, out=None, json=False, chart=False):
    """GPU kernels / launching ops / steps / idle and the CPU side (scheduler phases, ops by self time)."""
    from sglops.core.console import note, print_json
    from sglops.trace import analyze_to
    from sglops.views.show import show

    analysis, saved = cli.guarded(analyze_to, files, out, markdown=not json, chart=chart)
    if json:
        print_json({**analysis.to_json(), "report": saved})
    else:
        show(analysis)
        note(f"report: {saved['markdown']}" + (f", chart: {saved['chart']}" if "chart" in saved else ""))


@task(help={"a": "baseline: a profile run id, a folder of traces, files (comma-separated) or a quoted glob",
            "b": "the other side, the same way", "json": "print machine-readable JSON instead of tables",
            "top": "rows per table (default 12)"})
def diff_trace(c, a, b, json=False, top=12):
    """What changed between two profiles: per step, kernel, launching op and CPU phase, ranked by change."""
    from sglops.core.console import print_json
    from sglops.trace.diff import diff_specs
    from sglops.views.show import show

    result = cli.guarded(diff_specs, a, b)
    if json:
        print_json(result.to_json())
    else:
        show(result, top=int(top))


@task(help=cli.help_with(steps="forward steps to profile (the profiler stops itself after them; default 5)",
                         output_len="tokens the single decode stream generates (default 64)",
                         port="server port (default: the launch state on the host, else 30000)",
                         wait="seconds to wait for complete trace files (default 120)",
                         activities="CPU,GPU (default; CPU alone on a CPU server), MEM",
                         with_stack="record Python stacks (off: they are most of a trace's events)",
                         record_shapes="record op input shapes", by_stage="SGLang's profile_by_stage: "
                         "one file per rank for EXTEND and one for DECODE", chart="also draw the PNG chart",
                         vocab_size="the model's vocabulary when the host has no config.json for it"))
def profile(c, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None, json=False,
            steps=None, output_len=None, port=None, wait=None, activities=None, with_stack=False,
            record_shapes=False, by_stage=False, chart=False, vocab_size=None):
    """Torch-profile a decode on the host's SGLang, fetch every rank's trace, analyse GPU and CPU, record the run."""
    from sglops.trace.profile import run_profile

    o = cli.checked(values.PROFILE, steps=steps, output_len=output_len, port=port, wait=wait)
    extra = cli.checked({"vocab_size": values.Int(2, 1 << 24)}, vocab_size=vocab_size)
    bar = bool(host) and not json
    cli.per_host("profile", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container),
                 lambda r: run_profile(r, steps=o["steps"], output_len=o["output_len"], port=o["port"],
                                       wait_s=o["wait"], show_progress=bar, activities=activities,
                                       with_stack=with_stack, record_shapes=record_shapes, by_stage=by_stage,
                                       chart=chart, vocab_size=extra["vocab_size"]), json=json)


# -- bench ----------------------------------------------------------------------------------
@task(help=cli.help_with(runs="repeats (median + bootstrap 95% CI over them; default 5)",
                         input_len="prompt tokens, sent as input_ids (exact length; default 128)",
                         output_len="tokens to generate (ignore_eos, temperature 0; default 256)",
                         concurrency="streams in flight, e.g. 1,4,16 (default 1: single-stream decode)",
                         api="sglang (native /generate, the default) or openai (/v1/completions, e.g. for vLLM)",
                         port="the server's port on the host (default: the server sglops started there, else 30000)",
                         requests="requests per repeat and level (default: one per stream)",
                         warmup="warm-up rounds per level, not counted (default 1)",
                         vocab_size="the model's vocabulary when the host cannot read its config.json (prompt ids "
                                    "are drawn below it)",
                         no_logprobs="keep only the output token ids, not the chosen tokens' logprobs"))
def bench(c, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None, json=False, runs=None,
          input_len=None, output_len=None, concurrency=None, api=None, port=None, requests=None, warmup=None,
          vocab_size=None, no_logprobs=False):
    """Decode figures measured ON the host (TTFT, ITL, TPOT, decode tok/s, e2e), repeated, kept under artifacts/
    with each request's output ids and logprobs (for `inv compare`'s identity check)."""
    from sglops.bench import run as b
    from sglops.views.bench import board

    opts = cli.checked(values.BENCH, runs=runs, input_len=input_len, output_len=output_len, concurrency=concurrency,
                       api=api, port=port, requests=requests, warmup=warmup,
                       vocab_size=vocab_size, no_logprobs=no_logprobs)
    cli.per_host("bench", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container), b.step(board, **opts), json=json,
                 check=lambda result: b.check([result]))


@task(help={"run_a": "baseline run id (or prefix, or folder)", "run_b": "run(s) to compare, comma-separated",
            "json": "print machine-readable JSON", "no_chart": "skip the PNG chart",
            "require_identical": "exit 8 unless every run's outputs are identical to the baseline's (or within "
                                 "--tolerance-logprob / --min-identical-share)",
            "require_same_config": "exit 8 on a server-config difference not named by --variable (patches aside)",
            "tolerance_logprob": "non-deterministic kernels: largest |logprob difference| still accepted",
            "min_identical_share": "non-deterministic kernels: share of prompts (0-1) whose tokens must be identical",
            "variable": "config keys that are meant to differ, comma-separated (e.g. kv_cache_dtype,page_size)"})
def compare(c, run_a, run_b, json=False, no_chart=False, require_identical=False, require_same_config=False,
            tolerance_logprob=None, min_identical_share=None, variable=None):
    """Recorded bench runs against RUN_A (`inv compare A B,C`): ratios, 95% intervals, verdict, output identity,
    config differences, PNG of decode tok/s."""
    from sglops.bench import compare as cmp
    from sglops.core.console import print_json
    from sglops.views.show import show

    o = cli.checked(values.COMPARE, require_identical=require_identical, require_same_config=require_same_config,
                    tolerance_logprob=tolerance_logprob, min_identical_share=min_identical_share, variable=variable)
    result = cli.guarded(cmp.compare_with, [*run_a.split(","), *run_b.split(",")], o, chart=not no_chart)
    print_json(result.to_json()) if json else show(result)
    cli.guarded(result.check, o["require_identical"], o["require_same_config"])


@task(auto_shortflags=False, help={k: v for k, v in cli.help_with(
    a="side A: PROFILE, PROFILE+PATCH[+PATCH...], or +PATCH (the profile the host runs now)",
    b="side B, spelt the same way (patches named on either side are applied/reverted per round)",
    patch="this profile without vs with PATCH: A = --a (default: the current profile), B = A+PATCH",
    rounds="ABAB rounds, a restart before every bench (default 3, the fewest for a speed verdict)",
    runs="bench repeats per round (default 1: the rounds are the repeats)",
    input_len="prompt tokens (default 128)", output_len="tokens to generate (default 256)",
    concurrency="streams in flight, e.g. 1,4 (default 1)", api="sglang (default) or openai",
    requests="requests per repeat and level", warmup="warm-up rounds per level (default 1)",
    vocab_size="the model's vocabulary when the host cannot read its config.json",
    no_logprobs="do not ask the server for logprobs (token ids are still compared)",
    profile="also profile one round of each side and rank the trace diff (A -> B)",
    require_identical="exit 8 unless B's outputs are identical to A's (or within the tolerance)",
    require_same_config="exit 8 on a server-config difference not named by --variable (patches aside)",
    tolerance_logprob="non-deterministic kernels: largest |logprob difference| still accepted",
    min_identical_share="non-deterministic kernels: share of prompts (0-1) whose tokens must be identical",
    variable="config keys meant to differ between A and B, comma-separated (e.g. kv_cache_dtype)",
    dry_run="print the whole round plan; change and record nothing").items() if k not in ("hosts", "tag")})
def ab(c, host=None, sglang_root=None, accept_new_host_key=False, container=None, a=None, b=None, patch=None,
       rounds=None, runs=None, input_len=None, output_len=None, concurrency=None, api=None, requests=None, warmup=None,
       vocab_size=None, no_logprobs=False, profile=False, require_identical=False, require_same_config=False, tolerance_logprob=None,
       min_identical_share=None, variable=None, dry_run=False, json=False):
    """Interleaved A/B on one host (ABAB rounds, restart + patches ledger-checked each round): paired speed
    verdict, output identity, config differences; the host is left as it was found."""
    from sglops.bench import ab as ab_mod

    o = cli.checked(ab_mod.spec(), a=a, b=b, patch=patch, rounds=rounds, runs=runs, input_len=input_len,
                    output_len=output_len, concurrency=concurrency, api=api, requests=requests, warmup=warmup,
                    vocab_size=vocab_size, no_logprobs=no_logprobs, profile=profile,
                    require_identical=require_identical,
                    require_same_config=require_same_config, tolerance_logprob=tolerance_logprob,
                    min_identical_share=min_identical_share, variable=variable)
    step = cli.guarded(ab_mod.step, o, dry_run=dry_run, progress=not json)
    cli.per_host("ab", Targets(host, None, None, sglang_root, accept_new_host_key, container), step, json=json,
                 check=lambda r: r.check(o["require_identical"], o["require_same_config"]))


@task(help={"host": "only this host's runs", "task": "only runs of this task (e.g. bench)", "json": "JSON"})
def runs(c, host=None, task=None, json=False):
    """Recorded runs under artifacts/, with each bench's headline decode tok/s."""
    from sglops.bench import compare as cmp
    from sglops.core.console import print_json
    from sglops.views.show import show

    found = cli.guarded(cmp.list_runs, host, task)
    print_json(found.to_json()) if json else show(found)


# -- launch ---------------------------------------------------------------------------------
_LAUNCH_HELP = cli.help_with(port="override the profile's port", json="print machine-readable JSON")
_ONE_HOST = {k: v for k, v in _LAUNCH_HELP.items() if k not in ("hosts", "tag")}


@task(help=_ONE_HOST)
def render(c, profile, host=None, sglang_root=None, accept_new_host_key=False, container=None, port=None, json=False):
    """Print the launch script for PROFILE (with --host: checked against that host's SGLang release)."""
    from sglops.launch import server as launch

    o = cli.checked(values.PROFILE_NAME | values.PORT, profile=profile, port=port)
    if host is None:
        out = cli.guarded(launch.render_for, None, o["profile"], port=o["port"])
        return launch.show_script(out, json)
    cli.per_host("render", Targets(host, None, None, sglang_root, accept_new_host_key, container),
                 lambda r: launch.render_for(r, o["profile"], port=o["port"]), json=json, show=launch.show_script)


_RESTART_HELP = _LAUNCH_HELP | {"rollback": "start the last script of PROFILE that came up healthy",
                               "dry_run": "show the plan and the script; change nothing",
                               "timeout": "seconds to wait for /health (default: the profile's startup_timeout)"}


@task(help=_RESTART_HELP)
def restart(c, profile, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None,
            rollback=False, dry_run=False, timeout=None, port=None, json=False):
    """Restart the server with PROFILE: stop ours by pid file, start detached, wait for /health, explain crashes."""
    from sglops.launch import server as launch
    from sglops.views.launch import progress_view

    o = cli.checked(values.RESTART | values.PROFILE_NAME, profile=profile, timeout=timeout, port=port)
    cli.guarded(launch.check_restart_args, o["profile"], rollback)
    with progress_view(not json) as view:
        cli.per_host("restart", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container),
                     launch.restart_step(o["profile"], rollback=rollback, dry_run=dry_run, timeout=o["timeout"],
                                         port=o["port"], reporter=view, json=json), json=json, artifact="restart.json")


@task(help={k: v for k, v in _RESTART_HELP.items() if k not in ("rollback", "port")})
def rollback(c, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None, dry_run=False,
             timeout=None, json=False):
    """Start the last launch script that came up healthy on the host, whatever its profile."""
    from sglops.launch import server as launch
    from sglops.views.launch import progress_view

    timeout = cli.checked(values.RESTART, timeout=timeout)["timeout"]
    with progress_view(not json) as view:
        cli.per_host("rollback", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container),
                     launch.restart_step(None, rollback=True, dry_run=dry_run, timeout=timeout, port=None,
                                         reporter=view, json=json), json=json, artifact="restart.json")


@task(help={k: v for k, v in _LAUNCH_HELP.items() if k != "port"} | {
    "dry_run": "show what would be stopped; change nothing", "grace": "seconds between TERM and KILL (default 20)"})
def stop(c, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None,
         dry_run=False, grace=None, json=False):
    """Stop the server sglops started (process group and tree), or the container whose command is the server."""
    from sglops.launch import server as launch

    grace = cli.checked({"grace": values.Float(0, 3600, 20.0)}, grace=grace)["grace"]
    cli.per_host("stop", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container),
                 launch.stop_step(dry_run=dry_run, grace_s=grace), json=json)


@task(help=_LAUNCH_HELP)
def server_status(c, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None, port=None,
                  json=False):
    """The server sglops started: process, /health, effective args, recent restarts."""
    from sglops.launch import server as launch

    port = cli.checked(values.PORT, port=port)["port"]
    cli.per_host("server-status", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container),
                 lambda r: launch.status(r, port=port), json=json)


@task(help={k: v for k, v in _ONE_HOST.items() if k != "port"} | {"lines": "how many last lines (default 50)",
                                                                   "follow": "keep printing new lines (Ctrl-C stops)"})
def logs(c, host=None, sglang_root=None, accept_new_host_key=False, container=None, lines=None, follow=False, json=False):
    """The server's log on the host (<checkout>/.sglops/server.log; ~/.local/state/sglops/TREE/ for an installed tree)."""
    from sglops.launch import server as launch

    lines = cli.checked(values.LOGS, lines=lines)["lines"]
    cli.per_host("logs", Targets(host, None, None, sglang_root, accept_new_host_key, container),
                 lambda r: launch.logs(r, lines=lines, follow=follow), json=json,
                 show=None if not follow else (lambda _: None))


# -- plays -------------------------------------------------------------------------------------
@task(iterable=["var"], help=cli.help_with(dry_run="print the plan and the changes each step would make",
                                           from_="resume the last run of this play at this step",
                                           var="override a play variable: --var profile=sandbox (repeatable)"))
def play(c, name, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None, dry_run=False,
         from_=None, var=None, json=False):
    """Run a play (playbooks/NAME.yaml): its steps in order, stop at the first failure, --from resumes."""
    from sglops.play.cli import play_task

    play_task(name, Targets(host, hosts, tag, sglang_root, accept_new_host_key, container), dry_run=dry_run,
              from_step=from_, var=var, json=json)


@task(help={"run": "a run id (or unique prefix, or its folder)", "output": "where to write (default RUN/report.md)"})
def report(c, run, output=None):
    """Write a markdown report of a recorded run (a play, bench, profile...) with its charts."""
    from sglops.core.console import console
    from sglops.views.report import write_report

    console.print(f"report written: {cli.guarded(write_report, run, output)}")


# -- kernels -----------------------------------------------------------------------------------
@task(help=cli.help_with(name="a folder under kernels/ with a kernel.yaml",
                         dry_run="show the target, install path and commands; change nothing",
                         force="rebuild even when the sources and target are unchanged",
                         target="install here instead: site-packages | sglang | /abs/path on the host",
                         arch="build for this instead of the host's GPU: 9.0, sm_90a, sm_120"))
def build_kernel(c, name, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None,
                 dry_run=False, force=False, target=None, arch=None, json=False):
    """Build kernels/NAME for the host's GPU, self-test it there, install it atomically (logs in artifacts)."""
    from sglops.kernel import build as kernels

    spec = cli.guarded(kernels.load_kernel, cli.checked(values.KERNEL_NAME, name=name)["name"])
    cli.per_host("build-kernel", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container),
                 lambda r: kernels.build(r, spec, dry_run=dry_run, force=force, target=target, arch=arch), json=json)


@task(help=cli.help_with(name="an installed kernel (see `inv kernels`)", dry_run="show what would be removed"))
def uninstall_kernel(c, name, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None,
                     dry_run=False, json=False):
    """Remove a kernel build-kernel installed (its link, versioned copy, build tree and record)."""
    from sglops.kernel import build as kernels

    cli.checked(values.KERNEL_NAME, name=name)
    cli.per_host("uninstall-kernel", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container),
                 lambda r: kernels.uninstall(r, name, dry_run=dry_run), json=json)


@task(help=cli.help_with())
def kernels(c, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, container=None, json=False):
    """The kernels sglops installed on the host, from its record."""
    from sglops.kernel import build as kernels_lib

    cli.per_host("kernels", Targets(host, hosts, tag, sglang_root, accept_new_host_key, container), kernels_lib.installed,
                 json=json)
