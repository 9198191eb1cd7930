"""The launch question's data: the rules file
(playbooks/attention_rules.yaml), a launch's inputs and the answer.

Kept apart from the evaluation (sglops/probe/launch_path.py) so the view, the table script and the restart
check read the same shapes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglops.core import paths
from sglops.core.errors import ConfigError
from sglops.core.yamlio import load_yaml

RULES = paths.shipped("playbooks/attention_rules.yaml")
LAUNCH_PROBES = (
    "launch_helpers",
    "launch_default_backend",
    "launch_dsa_backends",
    "launch_sparse_switch",
    "launch_mla_arch",
    "launch_registry",
    "launch_validators",
)
STAGE_FLAGS = {"prefill": "prefill_attention_backend", "decode": "decode_attention_backend"}
READ_MODE_WORDS = {
    "whole_pool_cast": "casts the whole pool",
    "q_quantised": "quantises q (reads FP8 itself)",
    "dequant_in_smem": "reads FP8 itself (kernel converts tiles)",
    "rows_cast": "casts live rows",
    "native": "reads FP8 itself",
    "packed_fp8_inline_scales": "reads FP8 itself (packed pages, inline scales)",
    "raw_fp8": "reads FP8 itself (raw FP8)",
    "refuses": "refuses FP8 KV",
    "unknown": "read mode unknown",
}


@dataclass(frozen=True)
class Rules:
    """playbooks/attention_rules.yaml, parsed."""

    objects: dict[str, str]
    bindings: list[tuple[re.Pattern, str]]
    platform_map: str
    watched: re.Pattern
    assume: dict[str, Any]
    sm_names: dict[str, tuple[int, int]]
    models: dict[str, dict]
    sparse_impl: dict[str, Any]
    self_by_file: dict[str, str] = field(default_factory=dict)
    validators: dict[str, Any] = field(default_factory=dict)
    validate_on: tuple[str, ...] = ("sparse",)
    indexer_fields: str = "$^"


def load_rules(path: str | Path | None = None) -> Rules:
    """Read the bindings file (default playbooks/attention_rules.yaml); a bad regex names the entry."""
    path = Path(path) if path else RULES
    d = load_yaml(path)
    binds = []
    for b in d.get("bindings") or []:
        try:
            binds.append((re.compile(b["expr"]), str(b["value"])))
        except (re.error, KeyError, TypeError) as exc:
            raise ConfigError(f"{path}: binding {b!r}: {exc}") from None
    return Rules(
        objects=dict(d.get("objects") or {}),
        bindings=binds,
        platform_map=str(d.get("platform_map", "")),
        watched=re.compile(d.get("watched", "attention_backend")),
        assume=dict(d.get("assume") or {}),
        sm_names={k: tuple(v) for k, v in (d.get("sm_names") or {}).items()},
        models={k: dict(v) for k, v in (d.get("models") or {}).items()},
        sparse_impl=dict(d.get("sparse_impl") or {}),
        self_by_file=dict(d.get("self_by_file") or {}),
        validators=dict(d.get("validators") or {}),
        validate_on=tuple(d.get("validate_on") or ("sparse",)),
        indexer_fields=str(d.get("indexer_fields") or "$^"),
    )


@dataclass
class Launch:
    """One launch's inputs: the model's config.json keys, KV
    dtype, compute capability, flags (server-arg names)."""

    config: dict[str, Any]
    kv_dtype: str
    capability: tuple[int, int]
    flags: dict[str, Any] = field(default_factory=dict)
    cuda: tuple[int, int] = (12, 9)
    config_source: str = "--arch"

    @property
    def arch(self) -> str:
        return (self.config.get("architectures") or ["?"])[0]


@dataclass
class Choice:
    """A backend the launch will use for one stage, and why."""

    stage: str
    value: str | None
    # file:line
    rule: str
    # the conditions taken, "file:line cond"
    because: list[str]
    backend_file: str | None = None
    read_mode: str | None = None
    evidence: list[str] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class LaunchPath:
    """The answer: dense or sparse, the backend per stage, each with its rule and FP8 read mode."""

    version: str | None
    arch: str
    kv_dtype: str
    sm: str
    flags: dict[str, Any]
    mla: bool | None = None
    mla_rule: str = ""
    sparse: bool | None = None
    sparse_rule: str = ""
    choices: list[Choice] = field(default_factory=list)
    undetermined: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    renamed: list[str] = field(default_factory=list)
    # the DSA indexer's backends: field, value, where
    indexer: list[dict[str, Any]] = field(default_factory=list)
    # shared-memory limits the sparse code states (file:line text)
    limits: list[str] = field(default_factory=list)

    def choice(self, stage: str) -> Choice | None:
        return next((c for c in self.choices if c.stage == stage), None)

    def to_json(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in self.__dict__.items() if k != "choices"},
            "choices": [c.to_json() for c in self.choices],
        }


def launch_for(
    rules: Rules,
    *,
    arch: str | None,
    config: dict | None,
    config_source: str,
    kv_dtype: str,
    sm: str | None,
    flags: dict[str, Any],
) -> Launch:
    """The launch's inputs from the task's options: a
    config.json (host) or a seed model (--arch), an sm name."""
    if config is None:
        if not arch:
            raise ConfigError(
                "the launch question needs a model: --arch NAME or --model PATH (its config.json)"
            )
        config = rules.models.get(arch, {"architectures": [arch]})
        config_source = (
            f"--arch {arch} ("
            + (
                "seed config in playbooks/attention_rules.yaml"
                if arch in rules.models
                else "architectures only"
            )
            + ")"
        )
    if not sm:
        raise ConfigError(
            "the launch question needs the GPU: --sm sm120 (or a host whose facts name its GPUs)"
        )
    cap = rules.sm_names.get(sm)
    if cap is None:
        m = re.fullmatch(r"sm_?(\d+?)(\d)", sm.replace(".", ""))
        if not m:
            raise ConfigError(f"--sm {sm!r}: expected sm90, sm100, sm120 or a capability like 12.0")
        cap = (int(m.group(1)), int(m.group(2)))
    cuda = tuple(rules.assume.get("cuda", (12, 9)))
    return Launch(
        config=config,
        kv_dtype=kv_dtype,
        capability=(int(cap[0]), int(cap[1])),
        flags=flags,
        cuda=(int(cuda[0]), int(cuda[1])),
        config_source=config_source,
    )
