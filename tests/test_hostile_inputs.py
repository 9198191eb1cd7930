"""Every bad input a user can give ends in one line on stderr, a non-zero exit, and nothing changed.

One table of hostile inputs (files, flags, names, values, host lists), each run as `inv ...` inside
the test process (Invoke's own Program over tasks.py, so what Invoke parses is tested too). After each:
exactly one line on stderr, no traceback, the documented exit class, the artifacts folder and the
inventory untouched, and the sandbox hosts' trees as they were.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from inproc import run_inv

from sglops.core.errors import EXIT_REFUSED, EXIT_REMOTE, EXIT_USAGE

PLAY_OK_STEP = "  - do: facts\n"


@dataclass
class Case:
    id: str
    argv: list[str]
    files: dict[str, str | bytes] = field(default_factory=dict)  # under tmp; {tmp} in argv/env is replaced
    env: dict[str, str] = field(default_factory=dict)
    code: int = EXIT_USAGE
    says: str = ""  # a piece of the one line


def inventory(text: str | bytes, code: int = EXIT_USAGE, says: str = "") -> dict:
    return {"argv": ["facts", "--host", "gpu-a"], "files": {"inv.yaml": text},
            "env": {"SGLOPS_INVENTORY": "{tmp}/inv.yaml"}, "code": code, "says": says}


def play(text: str | bytes, *extra: str, says: str = "") -> dict:
    return {"argv": ["play", "{tmp}/p.yaml", "--host", "gpu-a", "--dry-run", *extra], "files": {"p.yaml": text},
            "says": says}


def bench(*flags: str, says: str = "") -> dict:
    return {"argv": ["bench", "--host", "gpu-a", *flags], "says": says}


CASES = [
    # -- the inventory ---------------------------------------------------------------------------------------
    Case("inventory hosts is a number", **inventory("hosts: 5\n", says="hosts must be a list")),
    Case("inventory not UTF-8", **inventory(b"hosts:\n  - name: caf\xe9\n", says="inv.yaml:2: not UTF-8")),
    Case("inventory is a list", **inventory("- name: a\n", says="inventory must be a mapping")),
    Case("inventory entry is a string", **inventory("hosts:\n  - gpu-a\n", says="inv.yaml: host entry must be a mapping")),
    Case("inventory port is text", **inventory("hosts:\n  - {name: a, port: abc}\n", says="inv.yaml:2: port")),
    Case("inventory port out of range", **inventory("hosts:\n  - {name: a, port: 70000}\n", says="1 to 65535")),
    Case("inventory tags is a number", **inventory("hosts:\n  - {name: a, tags: 5}\n", says="tags")),
    Case("inventory timeout is text", **inventory("hosts:\n  - {name: a, connect_timeout: soon}\n")),
    Case("inventory malformed YAML", **inventory("hosts: [\n", says="malformed YAML")),
    Case("inventory unknown field", **inventory("hosts:\n  - {name: a, adress: x}\n", says="unknown field 'adress'")),
    Case("inventory name with a comma", **inventory("hosts:\n  - {name: 'a,b'}\n", says="one word")),
    Case("inventory default undefined", **inventory("default: nope\nhosts: []\n", says="not defined")),
    Case("inventory host twice", **inventory("hosts:\n  - {name: a}\n  - {name: a}\n", says="defined twice")),
    Case("inventory defaults is a list", **inventory("defaults: [1]\n", says="defaults must be a mapping")),
    Case("inventory name is empty", **inventory("hosts:\n  - {name: ''}\n", says="one word")),
    # the loader's limits (red team F6/F7/F8): each was a hang, GBs and a MemoryError, or a silent replacement
    Case("inventory alias bomb", **inventory("a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)),
        says="expands to more than 200,000 values")),
    Case("inventory hosts: given twice", **inventory("hosts: []\ndefault: a\nhosts:\n  - {name: a}\n",
                                                     says="duplicate key 'hosts' (first at line 1)")),
    Case("inventory 20,000-deep nesting", **inventory("hosts: " + "[" * 20000 + "]" * 20000 + "\n",
                                                      says="nested deeper than")),
    Case("inventory a list as a key", **inventory("? [a, b]\n: 1\n", says="a list cannot be a mapping key")),
    # -- plays -----------------------------------------------------------------------------------------------
    Case("play steps is a number", **play("steps: 7\n", says="steps must be a list")),
    Case("play not UTF-8", **play(b"steps:\n  - do: facts # \xff\n", says="not UTF-8")),
    Case("play step is a string", **play("steps:\n  - facts\n", says="must be a mapping")),
    Case("play unknown step kind", **play("steps:\n  - do: benchmark\n", says="unknown step 'benchmark'")),
    Case("play step kind is a list", **play("steps:\n  - do: [facts]\n", says="unknown step")),
    Case("play with is a number", **play("steps:\n  - do: bench\n    with: 5\n", says="with must be a mapping")),
    Case("play runs is text", **play("steps:\n  - do: bench\n    with: {runs: x}\n", says="runs must be")),
    Case("play output_len 1e9", **play("steps:\n  - do: bench\n    with: {output_len: 1e9}\n",
                                       says="output_len must be a whole number from 2 to 1048576")),
    Case("play concurrency zero", **play("steps:\n  - do: bench\n    with: {concurrency: '0,4'}\n")),
    Case("play broken template", **play("steps:\n  - do: bench\n    with: {runs: '{{ runs'}\n", says="template")),
    Case("play undefined variable", **play("steps:\n  - do: bench\n    with: {runs: '{{ nope }}'}\n",
                                           says="'nope' is undefined")),
    Case("play vars is a list", **play("vars: [1]\nsteps:\n" + PLAY_OK_STEP, says="vars must be a mapping")),
    Case("play patch step without name", **play("steps:\n  - do: apply-patch\n", says="name is required")),
    Case("play patch name is a path", **play("steps:\n  - do: apply-patch\n    with: {name: ../../etc}\n",
                                             says="not a path")),
    Case("play force is text", **play("steps:\n  - do: revert-patch\n    with: {name: gather-cast, force: 'yes'}\n",
                                      says="true or false")),
    Case("play --from unknown step", **play("steps:\n" + PLAY_OK_STEP, "--from", "nope", says="no step 'nope'")),
    Case("play --var without =", **play("steps:\n" + PLAY_OK_STEP, "--var", "runs", says="KEY=VALUE")),
    Case("play --var bad YAML", **play("steps:\n  - do: bench\n    with: {runs: '{{ runs }}'}\n", "--var", "runs=[",
                                      says="malformed YAML")),
    Case("play --var wrong type", **play("steps:\n  - do: bench\n    with: {runs: '{{ runs }}'}\n", "--var",
                                         "runs=abc", says="runs must be")),
    Case("play vars: given twice", **play("vars: {a: 1}\nvars: {a: 2}\nsteps:\n" + PLAY_OK_STEP,
                                          says="duplicate key 'vars'")),
    Case("play step id used twice", **play("steps:\n  - do: facts\n  - do: facts\n", says="used twice")),
    Case("play --from with no earlier run", **play("steps:\n" + PLAY_OK_STEP + "  - {id: two, do: facts}\n", "--from",
                                              "two", says="nothing to resume")),
    # -- other YAML files --------------------------------------------------------------------------------------
    Case("profile field of the wrong type", ["render", "bad"], {"profiles/bad.yaml": "tp_size: many\n"},
         {"SGLOPS_PROFILES": "{tmp}/profiles"}, says="tp_size"),
    Case("profile per_host is a number", ["render", "bad"], {"profiles/bad.yaml": "per_host: 5\n"},
         {"SGLOPS_PROFILES": "{tmp}/profiles"}, says="per_host must be a mapping"),
    Case("profile startup_timeout is text", ["render", "bad"], {"profiles/bad.yaml": "startup_timeout: soon\n"},
         {"SGLOPS_PROFILES": "{tmp}/profiles"}, says="startup_timeout must be a number"),
    Case("profile port out of range", ["render", "bad"], {"profiles/bad.yaml": "port: 99999\n"},
         {"SGLOPS_PROFILES": "{tmp}/profiles"}, says="port must be a whole number from 1 to 65535"),
    Case("profile memory fraction NaN", ["render", "bad"], {"profiles/bad.yaml": "mem_fraction_static: .nan\n"},
         {"SGLOPS_PROFILES": "{tmp}/profiles"}, says="mem_fraction_static must be between"),
    Case("profile negative tp_size", ["render", "bad"], {"profiles/bad.yaml": "tp_size: -2\n"},
         {"SGLOPS_PROFILES": "{tmp}/profiles"}, says="tp_size must be between 1"),
    Case("profile chunked prefill 0", ["render", "bad"], {"profiles/bad.yaml": "chunked_prefill_size: 0\n"},
         {"SGLOPS_PROFILES": "{tmp}/profiles"}, says="chunked_prefill_size must be between -1"),
    # an empty flag (an unset $VAR) must never fall back to the inventory's default host (red team F5)
    Case("--host empty", ["apply-patch", "gather-cast", "--host", ""], says="--host is empty"),
    Case("--hosts empty", ["facts", "--hosts", " "], says="--hosts is empty"),
    Case("--tag empty", ["facts", "--tag", ""], says="--tag is empty"),
    Case("probe kind is a list", ["probe-backends", "--host", "gpu-a", "--probes", "{tmp}/probes.yaml"],
         {"probes.yaml": "probes:\n  - {id: x, kind: [grep], files: a.py, regex: a}\n"}, says="kind must be one of"),
    Case("probe file probes is a number", ["probe-backends", "--host", "gpu-a", "--probes", "{tmp}/probes.yaml"],
         {"probes.yaml": "probes: 5\n"}, says="probes must be a non-empty list"),
    Case("patch spec variants is a number", ["apply-patch", "bad", "--host", "gpu-a", "--dry-run"],
         {"patches/bad/patch.yaml": "description: x\nvariants: 5\n"}, {"SGLOPS_PATCHES": "{tmp}/patches"},
         says="variants in patch bad must be a list"),
    Case("kernel spec language unknown", ["build-kernel", "bad", "--host", "gpu-a", "--dry-run"],
         {"kernels/bad/kernel.yaml": "language: cobol\nsources: [a.cu]\npackage: p\nbuild: x\nselftest: y\n"},
         {"SGLOPS_KERNELS": "{tmp}/kernels"}),
    # -- flag values -----------------------------------------------------------------------------------------
    Case("--runs abc", **bench("--runs", "abc", says="--runs must be a whole number from 1 to 1000")),
    Case("--runs 0", **bench("--runs", "0")),
    Case("--output-len 1e9", **bench("--output-len", "1e9", says="--output-len")),
    Case("--input-len -1", **bench("--input-len=-1")),
    Case("--concurrency 0,4", **bench("--concurrency", "0,4", says="--concurrency")),
    Case("--concurrency x", **bench("--concurrency", "x")),
    Case("--api grpc", **bench("--api", "grpc", says="one of sglang, openai")),
    Case("--port 70000", **bench("--port", "70000", says="--port must be a whole number from 1 to 65535")),
    Case("--warmup -1", **bench("--warmup=-1")),
    Case("--requests 1.5", **bench("--requests", "1.5")),
    Case("--steps x", ["profile", "--host", "gpu-a", "--steps", "x"], says="--steps"),
    Case("--wait nan", ["profile", "--host", "gpu-a", "--wait", "nan"], says="--wait"),
    Case("--lines -5", ["logs", "--host", "gpu-a", "--lines=-5"], says="--lines"),
    Case("--timeout 0", ["restart", "sandbox", "--host", "gpu-a", "--timeout", "0"], says="--timeout"),
    Case("server-status --port abc", ["server-status", "--host", "gpu-a", "--port", "abc"]),
    Case("render --port 0", ["render", "sandbox", "--port", "0"]),
    Case("sandbox --hosts 99", ["sandbox", "up", "--hosts", "99", "--base", "{tmp}/sbx"], says="--hosts"),
    Case("sandbox action unknown", ["sandbox", "sideways", "--base", "{tmp}/sbx"], says="up, down, status"),
    Case("--engine grep", ["probe-backends", "--host", "gpu-a", "--engine", "grep"], says="--engine"),
    Case("--against yesterday", ["capture-patch", "x", "--host", "gpu-a", "--against", "yesterday"]),
    # -- names -----------------------------------------------------------------------------------------------
    Case("patch name is a path", ["apply-patch", "../../etc/passwd", "--host", "gpu-a"], says="not a path"),
    Case("unknown patch", ["apply-patch", "nosuch", "--host", "gpu-a"], says="no patch 'nosuch'"),
    Case("unknown profile", ["render", "nosuch"], says="no server profile 'nosuch'"),
    Case("profile name is a path", ["restart", "../x", "--host", "gpu-a"], says="or a .yaml file"),
    Case("unknown kernel", ["build-kernel", "nosuch", "--host", "gpu-a"], says="no kernel 'nosuch'"),
    Case("unknown play", ["play", "nosuch", "--host", "gpu-a"], says="no play 'nosuch'"),
    Case("unknown run for report", ["report", "nosuch-run"]),
    Case("unknown runs to compare", ["compare", "nosuch-a", "nosuch-b"]),
    Case("missing trace file", ["analyze-trace", "{tmp}/none.json"]),
    Case("trace that is not JSON", ["analyze-trace", "{tmp}/bad.json"], {"bad.json": "{not json"}),
    # -- host selection -------------------------------------------------------------------------------------
    Case("--hosts ,", ["facts", "--hosts", ","], says="--hosts names no host"),
    Case("--hosts a,a", ["facts", "--hosts", "gpu-a,gpu-a"], says="twice"),
    Case("--host and --tag", ["facts", "--host", "gpu-a", "--tag", "sandbox"], says="one of --host"),
    Case("unknown tag", ["facts", "--tag", "nosuchtag"], says="no host has tag"),
    Case("unknown host", ["facts", "--host", "nosuch"], says="unknown host 'nosuch'"),
    Case("address with a bad port", ["facts", "--host", "root@127.0.0.1:99999"], says="bad port"),
    # -- on the host: refused there, nothing changed ---------------------------------------------------------
    Case("sglang root that is not there", ["patches", "--host", "gpu-a", "--sglang-root", "/nonexistent/sglang"],
         code=EXIT_REMOTE, says="SGLang not found"),
    Case("a patch whose requirement the host does not meet", ["apply-patch", "fp8-kv-direct", "--host", "gpu-b"],
         code=EXIT_REFUSED, says="nothing changed"),
    Case("a variant the patch does not have", ["apply-patch", "gather-cast", "--host", "gpu-b", "--variant", "nosuch"],
         says="no variant 'nosuch'"),
]


def _digest(folder: Path, skip: tuple[str, ...] = ()) -> str:
    """Every file under folder, by path and content (an absent folder has its own digest)."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")) if folder.exists() else []:
        if p.name not in skip:
            h.update(str(p.relative_to(folder)).encode() + (p.read_bytes() if p.is_file() else b"/"))
    return h.hexdigest()


def _tree(root: Path) -> str:
    """A sandbox host's tree: git's view of its files, and sglops' state on it (ledger, journal, backups,
    transactions). The empty lock file a refused change takes stays out: it records nothing."""
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    return status + _digest(root / ".sglops", skip=("lock", ".gitignore"))


def test_the_table_is_large_and_covers_every_kind_of_input():
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_hostile_input_ends_in_one_line(case, use_sandbox, tmp_path, monkeypatch, capsys):
    work = tmp_path / "in"
    for rel, content in case.files.items():
        path = work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for key, value in case.env.items():
        monkeypatch.setenv(key, value.replace("{tmp}", str(work)))
    argv = [a.replace("{tmp}", str(work)) for a in case.argv]
    artifacts = Path(tmp_path / "artifacts")
    trees = {h: use_sandbox.host(h).sglang_root for h in ("gpu-a", "gpu-b") if h in argv}
    before = (_digest(artifacts), use_sandbox.inventory.read_bytes(), {h: _tree(r) for h, r in trees.items()})

    code, out, err = run_inv(capsys, *argv)

    lines = err.strip().splitlines()
    assert len(lines) == 1, f"want one line on stderr, got:\n{err}"
    assert "Traceback" not in err
    assert code == case.code, lines[0]
    assert case.says in lines[0]
    assert (_digest(artifacts), use_sandbox.inventory.read_bytes(), {h: _tree(r) for h, r in trees.items()}) == before
