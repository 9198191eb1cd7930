"""Benchmark: one question to N hosts at once: sglops vs
pyinfra, Ansible and `xargs -P ssh`, same remote work.

N real sshd sandbox hosts on loopback (each a release checkout of sglang 0.5.23, shared read-only). Every tool
runs the same command on every host: the host script sglops runs (`facts`, `engine_probe`) started the way
sglops starts it, `python3 -c BOOTSTRAP`, with the bundle and arguments sglops sends (the peers read them from
a file on the host, sglops writes them to stdin). So the host does the same work and the tools differ only in
how they reach the hosts. pyinfra (`pyinfra INVENTORY exec`) and ansible-core (`ansible all -m command`, forks
= N) each run from a venv of its own under ~/.cache/sglops (made with `pip install pyinfra` / `pip install
ansible-core`, never the project's dependencies): pass --pyinfra / --ansible. `xargs -P N ssh` is the floor:
OpenSSH, one process per host.

Per run: wall time; client CPU (the tool's process tree); host CPU (every sandbox sshd's own and reaped
children's CPU: the sessions and the host scripts); peak RSS of the tool's largest process. The probe runs
with each host's tree cache emptied before every run (`--cold`, the greps run every time) or kept (a repeat
probe). Interleaved (every tool once per round), medians, the load stated.
Run: python3 benchmarks/bench_fanout.py --hosts 1,4,16 --repeats 3 \\
     --pyinfra ~/.cache/sglops/bench-pyinfra/bin --ansible ~/.cache/sglops/bench-ansible/bin \\
     [--cold] [--out benchmarks/results/fanout.json]
`--before DIR` adds sglops as an earlier commit has it (`git archive COMMIT | tar -x -C DIR`), in the same
rounds ("sglops-before"); `--tools sglops,pyinfra` runs only those.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglops.core.host_bundle import BOOTSTRAP, payload  # noqa: E402
from sglops.probe.scan import request  # noqa: E402
from sglops.probe.spec import load_probe_set  # noqa: E402
from sglops.sandbox import trees  # noqa: E402
from sglops.sandbox.sshd import HOST_PYTHON, LOOPBACK, Sandbox  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def sshd_cpu(pids: list[int]) -> float:
    """CPU seconds of these sshd daemons and of their children they reaped (sessions, host scripts)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        # utime stime cutime cstime
        total += sum(int(v) for v in fields[11:15])
    return total / CLK


def timed(argv: list[str], env: dict, cwd: Path, daemons: list[int]) -> dict:
    """One whole command: wall, client CPU, host CPU, peak RSS (MiB) of its largest process."""
    host0 = sshd_cpu(daemons)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    # the last sessions' sshd processes exit and are reaped
    time.sleep(0.05)
    host = sshd_cpu(daemons) - host0
    if proc.returncode:
        raise SystemExit(f"{argv[0]} ...: exit {proc.returncode}: {(err or out).decode()[-600:]}")
    return {"wall_s": wall, "host_cpu_s": host, "out": len(out)}


def run(argv: list[str], env: dict, cwd: Path, daemons: list[int]) -> dict:
    """timed() with the client's CPU and peak RSS from the kernel (a process of our own, waited on here)."""
    before = os.times()
    r = timed(argv, env, cwd, daemons)
    after = os.times()
    r["client_cpu_s"] = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return r


def peak_rss_mib(argv: list[str], env: dict, cwd: Path) -> float:
    """Peak RSS of the command's largest process (GNU time's %M), in MiB."""
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "@@RSS %M", *argv], env=env, cwd=cwd, capture_output=True, text=True
    )
    line = next((ln for ln in proc.stderr.splitlines() if ln.startswith("@@RSS ")), "@@RSS 0")
    return int(line.split()[1]) / 1024


def pool_sizes(sb: Sandbox, sizes: list[int], repeats: int) -> list[dict]:
    """Facts on every sandbox host through on_hosts with
    each worker count, interleaved: wall and client CPU."""
    from sglops.core.hosts import load_inventory
    from sglops.core.parallel import on_hosts
    from sglops.probe.facts import gather

    inv = load_inventory(sb.inventory)
    hosts = [inv.get(h.name) for h in sb.hosts]
    # warm
    on_hosts(hosts, gather, inventory=inv)
    runs: dict = {k: [] for k in sizes}
    for _ in range(repeats):
        for k in sizes:
            start, cpu = time.perf_counter(), time.process_time()
            failed = [
                f"{o.host.name}: {o.error}"
                for o in on_hosts(hosts, gather, inventory=inv, max_workers=k)
                if not o.ok
            ]
            if failed:
                raise SystemExit(f"{len(failed)} hosts failed with {k} workers: {failed[:3]}")
            runs[k].append((time.perf_counter() - start, time.process_time() - cpu))
    rows = [
        {
            "workers": k,
            "hosts": len(hosts),
            "wall_s": statistics.median(w for w, _ in v),
            "client_cpu_s": statistics.median(c for _, c in v),
        }
        for k, v in runs.items()
    ]
    for r in rows:
        print(
            f"pool: facts on {r['hosts']} hosts, {r['workers']:3} workers: wall {r['wall_s']:.2f} s, client"
            f" CPU {r['client_cpu_s']:.2f} s",
            flush=True,
        )
    return rows


def main() -> None:  # noqa: C901 - one linear script: set-up, the command lines, the rounds, the table
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", default="1,4,16,32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pyinfra", help="bin folder of a venv with pyinfra")
    ap.add_argument("--ansible", help="bin folder of a venv with ansible-core")
    ap.add_argument("--ops", default="facts,probe-backends")
    ap.add_argument(
        "--cold", action="store_true", help="empty every host's probe cache before each probe run"
    )
    ap.add_argument(
        "--pool", help="also: facts on the most hosts with these worker counts (in-process on_hosts)"
    )
    ap.add_argument(
        "--before", help="a checkout of an earlier sglops (git archive): also run it, as sglops-before"
    )
    ap.add_argument("--tools", help="only these tools (sglops, sglops-before, pyinfra, ansible, xargs)")
    ap.add_argument("--out")
    args = ap.parse_args()
    counts = [int(n) for n in args.hosts.split(",")]
    figures: dict = {
        "load_before": open("/proc/loadavg").read().split()[:3],
        "cores": os.cpu_count(),
        "repeats": args.repeats,
        "cold": args.cold,
        "rows": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        names = [f"h{i}" for i in range(max(counts))]
        template = trees.sglang_template("0.5.23")
        for name in names:
            (base / name).mkdir()
            # the real release checkout, one copy for every host
            (base / name / "sglang").symlink_to(template)
        sb = Sandbox(base, [{"name": n} for n in names]).start()
        try:
            daemons = [h.proc.pid for h in sb.hosts]
            # no ControlPersist master: its sessions would outlive the run (host CPU)
            env = {
                **os.environ,
                "SGLOPS_INVENTORY": str(sb.inventory),
                "SGLOPS_ARTIFACTS": str(base / "art"),
                "PYTHONPATH": str(REPO),
                "ANSIBLE_HOST_KEY_CHECKING": "True",
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_LOCAL_TEMP": str(base / "ansible-tmp"),
                "ANSIBLE_STDOUT_CALLBACK": "minimal",
                "ANSIBLE_SSH_ARGS": "",
            }
            # installs have their .pyc files: compile once, not per run
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            ps = load_probe_set()
            payloads = {
                "facts": lambda h: payload("facts", {"sglang_root": str(h.sglang_root), "port": None}),
                # what `inv probe-backends` sends: the probe behind the check of which engine serves there
                "probe-backends": lambda h: payload(*request(str(h.sglang_root), ps, other_engines=True)),
            }
            # the peers' stdin, as a file on the host
            for h in sb.hosts:
                for op, make in payloads.items():
                    (h.home / f"{op}.payload").write_bytes(make(h))
            remote = {
                op: f"{HOST_PYTHON} -c {shlex.quote(BOOTSTRAP)} < $HOME/{op}.payload" for op in payloads
            }
            ssh = [
                "ssh",
                "-F",
                "/dev/null",
                "-i",
                str(sb.client_key),
                "-o",
                "BatchMode=yes",
                "-o",
                f"UserKnownHostsFile={sb.known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
            ]
            if args.pool:
                figures["pool"] = pool_sizes(sb, [int(k) for k in args.pool.split(",")], args.repeats)
            for n in counts:
                hosts = sb.hosts[:n]
                (base / f"ports{n}").write_text("".join(f"{h.port}\n" for h in hosts))
                (base / f"pyinfra{n}.py").write_text(
                    "hosts = "
                    + repr(
                        [
                            (
                                h.name,
                                {
                                    "ssh_hostname": LOOPBACK,
                                    "ssh_port": h.port,
                                    "ssh_user": "root",
                                    "ssh_key": str(sb.client_key),
                                    "ssh_known_hosts_file": str(sb.known_hosts),
                                    "ssh_strict_host_key_checking": "yes",
                                },
                            )
                            for h in hosts
                        ]
                    )
                    + "\n"
                )
                (base / f"ansible{n}.ini").write_text(
                    "[all]\n"
                    + "".join(
                        f"{h.name} ansible_host={LOOPBACK} ansible_port={h.port} ansible_user=root "
                        f"ansible_ssh_private_key_file={sb.client_key} "
                        f"ansible_ssh_common_args='-F /dev/null -o UserKnownHostsFile={sb.known_hosts}' "
                        f"ansible_python_interpreter={HOST_PYTHON}\n"
                        for h in hosts
                    )
                )
                for op in args.ops.split(","):
                    tools = {
                        "sglops": [
                            sys.executable,
                            "-m",
                            "invoke",
                            "-r",
                            str(REPO),
                            op,
                            "--hosts",
                            ",".join(h.name for h in hosts),
                        ],
                        "xargs": [
                            "sh",
                            "-c",
                            (
                                f"xargs -P {n} -I{{}} {shlex.join(ssh)} -p {{}} root@{LOOPBACK} "
                                f"{shlex.quote(remote[op])} < {base / f'ports{n}'}"
                            ),
                        ],
                    }
                    if args.pyinfra:
                        tools["pyinfra"] = [
                            f"{args.pyinfra}/pyinfra",
                            "-y",
                            "--parallel",
                            str(n),
                            str(base / f"pyinfra{n}.py"),
                            "exec",
                            "--",
                            remote[op],
                        ]
                    if args.ansible:
                        tools["ansible"] = [
                            f"{args.ansible}/ansible",
                            "all",
                            "-i",
                            str(base / f"ansible{n}.ini"),
                            "-f",
                            str(n),
                            "-m",
                            "shell",
                            "-a",
                            remote[op],
                        ]
                    if args.before:
                        before = str(Path(args.before).resolve())
                        tools["sglops-before"] = [
                            "env",
                            f"PYTHONPATH={before}",
                            *tools["sglops"][:4],
                            before,
                            *tools["sglops"][5:],
                        ]
                    if args.tools:
                        tools = {t: argv for t, argv in tools.items() if t in args.tools.split(",")}

                    def cold(op: str = op, hosts: list = hosts) -> None:
                        if args.cold and op == "probe-backends":
                            for h in hosts:
                                shutil.rmtree(h.home / ".cache" / "sglops" / "probe-scan", ignore_errors=True)

                    # warm-up: page cache, .pyc, host caches
                    for argv in tools.values():
                        cold()
                        run(argv, env, base, daemons)
                    runs: dict = {t: [] for t in tools}
                    for _ in range(args.repeats):
                        for tool, argv in tools.items():
                            cold()
                            runs[tool].append(run(argv, env, base, daemons))
                    for tool, rs in runs.items():
                        cold()
                        row = {
                            "op": op,
                            "hosts": n,
                            "tool": tool,
                            **{
                                k: statistics.median(r[k] for r in rs)
                                for k in ("wall_s", "client_cpu_s", "host_cpu_s")
                            },
                            "walls_s": [round(r["wall_s"], 3) for r in rs],
                            "peak_rss_mib": peak_rss_mib(tools[tool], env, base),
                            "load": open("/proc/loadavg").read().split()[0],
                        }
                        figures["rows"].append(row)
                        print(
                            f"{op:15} N={n:3} {tool:8} wall {row['wall_s']:7.2f} s  client CPU"
                            f" {row['client_cpu_s']:6.2f} s  host CPU {row['host_cpu_s']:6.2f} s  peak RSS"
                            f" {row['peak_rss_mib']:6.0f} MiB  (load {row['load']})",
                            flush=True,
                        )
        finally:
            sb.stop()
    figures["load_after"] = open("/proc/loadavg").read().split()[:3]
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
