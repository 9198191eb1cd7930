"""Every step kind a play can use works in a dry run, and a dry run is never resumed as if it had run.

Before: the build-kernel step called a function that does not exist (AttributeError even under
--dry-run), and `--from` resumed the last run even when it was a dry run, reusing its placeholders.
"""

from __future__ import annotations

import inspect
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import open_remote

from sglops.core import artifacts
from sglops.core.errors import ConfigError
from sglops.play.run import run_play
from sglops.play.spec import load_play
from sglops.play.steps import STEPS

# the smallest `with:` for each kind, and the steps it needs before it
DRY_RUN_CASES = {
    "facts": ({}, []),
    "probe": ({}, []),
    "apply-patch": ({"name": "gather-cast"}, []),
    "revert-patch": ({"name": "gather-cast"}, []),
    "build-kernel": ({"name": "gather_cast"}, []),
    "restart": ({"profile": "sandbox"}, []),
    "bench": ({"runs": 1, "output_len": 8}, []),
    "profile": ({"steps": 2}, []),
    "compare": ({}, [{"id": "b1", "do": "bench"}, {"id": "b2", "do": "bench"}]),
    "ab": ({"a": "sandbox", "b": "sandbox+gather-cast", "rounds": 2, "output_len": 8}, []),
    "sweep": ({"profile": "sandbox", "vary": ["attention_backend=flashinfer,triton"], "output_len": 8}, []),
}


def _play(tmp_path: Path, steps: list[dict]) -> Path:
    path = tmp_path / "play.yaml"
    path.write_text(yaml.safe_dump({"name": "steps-under-test", "steps": steps}))
    return path


def _host_state(sb, name: str) -> tuple[str, list[str]]:
    root = sb.host(name).sglang_root
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    state = root / ".sglops"
    return status, sorted(p.name for p in state.glob("*") if p.name not in ("lock", ".gitignore"))


# kinds whose dry run needs more than the default sandbox (duel: a host with both engines' vars)
NEEDS_OWN_HOST = {"duel"}


def test_every_step_kind_has_a_dry_run_case_and_its_function_takes_its_parameters():
    assert set(DRY_RUN_CASES) | NEEDS_OWN_HOST == set(STEPS), "a new step kind needs its dry-run case here"
    for kind, op in STEPS.items():
        keys = {p.name: p.kind.default for p in op.fields("play")}
        assert set(keys) == set(op.spec("play")), f"{kind}: a with: key without a kind to check it"
        # a key the function does not take raises here
        inspect.signature(op.run).bind(None, **keys)


@pytest.mark.parametrize("kind", sorted(DRY_RUN_CASES))
def test_each_step_kind_runs_dry_and_changes_nothing(kind, use_sandbox, tmp_path):
    params, before = DRY_RUN_CASES[kind]
    play = load_play(str(_play(tmp_path, [*before, {"id": "under-test", "do": kind, "with": params}])))
    state = _host_state(use_sandbox, "gpu-a")
    with open_remote(use_sandbox, "gpu-a") as remote:
        result = run_play(remote, play, dry_run=True, show=False)
    step = result.steps[-1]
    assert step.status == "ok", step.error
    assert result.ok and result.run_id.endswith("-dry")
    # its result is on record as JSON
    assert json.dumps(step.result)
    assert _host_state(use_sandbox, "gpu-a") == state, f"the dry run of {kind} changed the host"


def test_from_never_resumes_a_dry_run(use_sandbox, tmp_path):
    play = load_play(str(_play(tmp_path, [{"id": "one", "do": "facts"}, {"id": "two", "do": "facts"}])))
    with open_remote(use_sandbox, "gpu-b") as remote:
        run_play(remote, play, dry_run=True, show=False)
        with pytest.raises(ConfigError, match="only dry runs, which have nothing to resume"):
            run_play(remote, play, from_step="two", show=False)
        real = run_play(remote, play, show=False)
        assert not real.dry_run and real.ok
        played = Path(real.run_dir) / "play.json"
        recorded = played.read_text()
        planned = run_play(remote, play, dry_run=True, from_step="two", show=False)
        resumed = run_play(remote, play, from_step="two", show=False)
    assert planned.run_id != real.run_id and planned.run_id.endswith("-dry"), (
        "a dry resume is a run of its own"
    )
    assert planned.steps[0].status == "reused" and planned.steps[0].result == real.steps[0].result
    assert resumed.run_id == real.run_id, (
        "a real resume continues the last real run, not the dry one after it"
    )
    assert json.loads(recorded)["dry_run"] is False
    assert [m["run_id"] for m in artifacts.list_runs("gpu-b") if m.get("task") == "play"].count(
        real.run_id
    ) == 1


@pytest.mark.parametrize("kind", ["bench", "profile"])
def test_the_task_dry_run_is_the_play_dry_run(kind, use_sandbox, tmp_path, capsys):
    """One runner (sglops.core.op.perform): `inv bench --dry-run` answers the plan a play's dry run records
    for the same step, and records nothing."""
    from inproc import run_inv

    params, _ = DRY_RUN_CASES[kind]
    play = load_play(str(_play(tmp_path, [{"id": "under-test", "do": kind, "with": params}])))
    with open_remote(use_sandbox, "gpu-a") as remote:
        planned = run_play(remote, play, dry_run=True, show=False).steps[-1].result
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in params.items()]
    runs = len(artifacts.list_runs("gpu-a"))
    code, out, err = run_inv(capsys, kind, "--host", "gpu-a", "--dry-run", "--json", *flags)
    assert code == 0, err + out
    doc = json.loads(out)
    assert doc["dry_run"] is True and doc["plan"] == planned["plan"] and planned["plan"]
    assert "artifact" not in doc and len(artifacts.list_runs("gpu-a")) == runs


@pytest.mark.parametrize(
    "kind,module,parser",
    [
        ("sweep", "sglops.experiment.sweep_plan", "candidates"),
        ("ab", "sglops.experiment.ab_plan", "parse_sides"),
    ],
)
def test_a_step_parses_its_flags_once(kind, module, parser, use_sandbox, tmp_path, monkeypatch):
    """Sweep candidates and ab sides are parsed once, by the operation's prepare, and handed on parsed."""
    import importlib

    mod = importlib.import_module(module)
    calls = []
    real = getattr(mod, parser)
    monkeypatch.setattr(mod, parser, lambda *a: calls.append(a) or real(*a))
    params, _ = DRY_RUN_CASES[kind]
    play = load_play(str(_play(tmp_path, [{"id": "under-test", "do": kind, "with": params}])))
    with open_remote(use_sandbox, "gpu-a") as remote:
        assert run_play(remote, play, dry_run=True, show=False).ok
    assert len(calls) == 1


def test_ab_patch_side_is_a_plus_the_patch_without_reparsing():
    from sglops.core.errors import ConfigError as Refused
    from sglops.experiment.ab_plan import parse_sides

    a, b = parse_sides("glm5+gather-cast", None, "fp8-kv-direct")
    assert (a.profile, a.patches, b.profile, b.patches) == (
        "glm5",
        ("gather-cast",),
        "glm5",
        ("gather-cast", "fp8-kv-direct"),
    )
    assert b.text == "glm5+gather-cast+fp8-kv-direct"
    assert parse_sides(None, None, "gather-cast")[1].patches == ("gather-cast",)
    with pytest.raises(Refused, match="names a patch twice"):
        parse_sides("glm5+gather-cast", None, "gather-cast")
    with pytest.raises(Refused, match="--patch"):
        parse_sides("glm5", None, "bad name")


def test_sweep_hands_every_checked_option_on(monkeypatch):
    """The sweep's way in passes the prepared candidates and
    every option (a dropped --force ran nothing forced)."""
    from sglops.experiment import sweep

    got = {}
    monkeypatch.setattr(sweep, "run_sweep", lambda ctx, profile, cands, **kw: got.update(kw, cands=cands))
    sweep.run_checked(None, {"profile": "p", "cands": ["c1", "c2"], "force": True, "profile_trace": True})
    assert got["cands"] == ["c1", "c2"] and got["force"] is True and got["profile_trace"] is True
