"""No value a user can set runs as a shell command on the host: every launch template x every value x every
hostile string.

Each case puts one hostile string (a line break of any kind, NUL, `$(...)`, backticks, quotes, `;`, `#`, ...)
into one value that reaches a launch script (profile fields, env, extra_args, launcher, python, per_host,
inventory vars and root, the host's name, a sweep candidate, a play's --var), then either sglops refuses it in
one line, or the rendered script passes `bash -n` and, run under bash in a temporary folder, hands the value
to the launched command as one argument, unchanged, and no canary file appears (every hostile string tries to
create it).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglops.core.errors import ConfigError
from sglops.core.hosts import Host
from sglops.experiment import sweep_plan
from sglops.experiment.sweep import candidate_profile
from sglops.launch.profiles import _build
from sglops.launch.render import render
from sglops.play.ops import parse_vars

# the launched command: each argument it gets, NUL-ended
PRINT_ARGS = ["/usr/bin/printf", "%s\\0"]


def hostile(canary: str) -> list[str]:
    """Strings that would create the canary file if any byte of them reached the shell as code."""
    touch = f"touch {canary}"
    return [
        f"x\n{touch}",
        f"x\r{touch}",
        f"x\r\n{touch}",
        f"x\x00{touch}",
        f"x\x0b{touch}",
        f"x\x0c{touch}",
        f"x\u0085{touch}",
        f"x\u2028{touch}",
        f"x\u2029{touch}",
        f"x\x1b]0;{touch}\x07",
        f"x\\\n{touch}",
        f"$({touch})",
        f"`{touch}`",
        f"'; {touch}; '",
        f'"; {touch}; "',
        f"x; {touch}",
        f"x && {touch}",
        f"x | {touch}",
        f"x # \n{touch}",
        f"${{IFS}}{touch.replace(' ', '${IFS}')}",
        "x\\",
        f"'$({touch})'",
        f"x\t{touch}",
        f"-- {touch}",
        f"{{vars.v}}$({touch})",
        f"x\n{touch} #",
        f"x\u2028{touch} #",
    ]


def _profile(engine: str, **fields: Any) -> Any:
    data = {
        "engine": engine,
        "launcher": list(PRINT_ARGS),
        "model_path": "/models/m",
        "port": 30000,
        "startup_timeout": 10,
        **fields,
    }
    return _build("p", Path("/nowhere/p.yaml"), data)


def _host(root: Path, **over: Any) -> Host:
    return Host(
        **{"name": "gpu-x", "address": "127.0.0.1", "sglang_root": str(root), "vars": {"v": "ok"}, **over}
    )


# field -> how one hostile value s becomes (profile, host) for a template; each is a user-settable value.
Make = Callable[[str, str, Path], tuple[Any, Host]]
SCALAR_KEYS = [
    "model_path",
    "served_model_name",
    "tokenizer_path",
    "host",
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "dsa_prefill_backend",
    "dsa_decode_backend",
    "kv_cache_dtype",
    "device",
    "grammar_backend",
    "quantization",
    "moe_runner_backend",
    "dist_init_addr",
]


def _sweep_candidate(engine: str, s: str, root: Path) -> tuple[Any, Host]:
    c = sweep_plan.candidates(None, None, [f"served_model_name={s}", "served_model_name=b"])[0]
    return candidate_profile(_profile(engine), c, "gpu-x"), _host(root)


def _play_var(engine: str, s: str, root: Path) -> tuple[Any, Host]:
    # a YAML double-quoted scalar: escapes decoded
    value = parse_vars([f"name={json.dumps(s)}"])["name"]
    return _profile(engine, served_model_name=value), _host(root)


def _scalar(key: str) -> Make:
    return lambda e, s, r: (_profile(e, **{key: s}), _host(r))


FIELDS: dict[str, Make] = {
    **{f"profile {k}": _scalar(k) for k in SCALAR_KEYS},
    "profile name": lambda e, s, r: (
        _build(s, Path("/nowhere/p.yaml"), {"engine": e, "launcher": PRINT_ARGS, "model_path": "m"}),
        _host(r),
    ),
    "profile env value": lambda e, s, r: (_profile(e, env={"HF_HOME": s}), _host(r)),
    "profile env name": lambda e, s, r: (_profile(e, env={s: "1"}), _host(r)),
    "profile extra_args": lambda e, s, r: (_profile(e, extra_args=["--x", s]), _host(r)),
    "profile launcher": lambda e, s, r: (_profile(e, launcher=[PRINT_ARGS[0], PRINT_ARGS[1], s]), _host(r)),
    "profile python": lambda e, s, r: (_profile(e, launcher="module", python=s), _host(r)),
    "profile per_host": lambda e, s, r: (_profile(e, per_host={"gpu-x": {"served_model_name": s}}), _host(r)),
    "inventory var": lambda e, s, r: (_profile(e, served_model_name="{vars.v}"), _host(r, vars={"v": s})),
    "inventory sglang_root": lambda e, s, r: (_profile(e), _host(r, sglang_root=s)),
    "inventory python": lambda e, s, r: (_profile(e, launcher="module"), _host(r, python=s)),
    "host name": lambda e, s, r: (_profile(e), _host(r, name=s)),
    "sweep candidate": _sweep_candidate,
    "play --var": _play_var,
}
TEMPLATES = ("sglang", "vllm")
# the rest vLLM ignores
VLLM_KEYS = {"model_path", "served_model_name", "host", "kv_cache_dtype", "quantization"}
NOT_IN_ARGV = {
    "profile name",
    "host name",
    "profile env value",
    "profile env name",
    "profile launcher",
    "profile python",
    "inventory python",
    "inventory sglang_root",
}


# One bash runs every rendered script: `bash -n` on it, then the script itself in a subshell (its `exec` ends
# the subshell only), stdout/stderr/exit code kept per case. Forks from bash are cheap; a Python subprocess
# each is not.
DRIVER = """
cd "$1"
for f in case-*.sh; do
  n=${f%.sh}
  bash -n "$f" 2> "$n.syntax" || echo bad > "$n.syntax-failed"
  ( cd root && exec bash "../$f" ) > "$n.out" 2> "$n.err" < /dev/null
  echo $? > "$n.rc"
done
"""


def _run_all(scripts: dict[int, str], folder: Path) -> dict[int, tuple[int, list[str], str, str | None]]:
    """Per case: (exit code, the arguments the launched command got, stderr, bash -n's complaint or None)."""
    for i, script in scripts.items():
        (folder / f"case-{i:05d}.sh").write_text(script)
    subprocess.run(
        ["bash", "-c", DRIVER, "driver", str(folder)],
        check=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(folder)},
    )
    out = {}
    for i in scripts:
        n = folder / f"case-{i:05d}"
        bad = Path(f"{n}.syntax").read_text(errors="replace") if Path(f"{n}.syntax-failed").exists() else None
        out[i] = (
            int(Path(f"{n}.rc").read_text()),
            Path(f"{n}.out").read_bytes().decode("utf-8", "replace").split("\0"),
            Path(f"{n}.err").read_text(errors="replace"),
            bad,
        )
    return out


def test_no_value_in_any_template_runs_as_a_command(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    # index -> (engine, field, value, its canary)
    cases: dict[int, tuple[str, str, str, str]] = {}
    scripts: dict[int, str] = {}
    refused = 0
    for engine in TEMPLATES:
        for field, make in FIELDS.items():
            for k in range(len(hostile(""))):
                i = len(cases)
                canary = str(tmp_path / f"CANARY-{i}")
                s = hostile(canary)[k]
                cases[i] = (engine, field, s, canary)
                try:
                    profile, host = make(engine, s, root)
                    scripts[i] = render(profile, host).script
                except ConfigError as exc:
                    assert "\n" not in str(exc) and "\r" not in str(exc), cases[i]
                    refused += 1
    results = _run_all(scripts, tmp_path)
    # the canary, or a file named from it
    fired = [
        f"{cases[i][0]} {cases[i][1]} {cases[i][2]!r}"
        for i in results
        if Path(cases[i][3]).exists() or list(tmp_path.glob(Path(cases[i][3]).name + "[!0-9]*"))
    ]
    assert not fired, f"{len(fired)} canaries fired: {fired[:5]}"
    for i, (code, args, err, bad_syntax) in results.items():
        engine, field, s, canary = cases[i]
        case = f"{engine} {field} {s!r}"
        assert bad_syntax is None, f"{case}: bash -n: {bad_syntax}\n{scripts[i]}"
        unused = (
            engine == "vllm"
            and field.removeprefix("profile ") in SCALAR_KEYS
            and field.removeprefix("profile ") not in VLLM_KEYS
        )
        if code == 0 and field not in NOT_IN_ARGV and not unused:
            assert {s, s.replace("{vars.v}", "ok")} & set(args), f"{case}: {args}\n{err}"
    assert not list(tmp_path.glob("CANARY*"))
    assert refused + len(results) == len(TEMPLATES) * len(FIELDS) * len(hostile(""))
    assert refused >= 600 and len(results) >= 300, (refused, len(results))


@pytest.mark.parametrize("s", ["x\ny", "x\ry", "x\x00y", "x\u2028y", "x\u0085y"])
def test_a_line_break_in_a_candidate_or_var_is_refused_before_anything_runs(s):
    with pytest.raises(ConfigError, match="control character"):
        sweep_plan.candidates([f"served_model_name=a,{s}"], None, None)
    with pytest.raises(ConfigError, match="control character"):
        sweep_plan.candidates(None, None, [f"served_model_name={s}", "served_model_name=b"])
    with pytest.raises(ConfigError, match="control character"):
        parse_vars([f"k={s}"])
