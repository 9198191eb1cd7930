"""Which bottleneck the diagnosis rules name for which time split (cases: tests/cases/diagnosis.yaml).

The rules are the repo's own playbooks/diagnosis.yaml; kernel and op names are real ones from H200 traces.
"""

from __future__ import annotations

import pytest

from sglops.trace.diagnose import diagnose, load_rules
from tests.cases import cases


@pytest.mark.parametrize("case", cases("diagnosis"))
def test_diagnosis(case):
    pairs = {(op, kernel): float(us) for op, kernel, us in case["op_kernel"]}
    facts = {
        "op_kernel": pairs,
        "scope_gpu_us": case.get("scope_gpu_us", sum(pairs.values())),
        "scope_label": "in decode steps",
        "window_us": case.get("window_us", 1000.0),
        "idle_us": case.get("idle_us", 0.0),
    }
    found = diagnose(facts, load_rules(), short=lambda k: k.split("<")[0].removeprefix("void ")[:40])
    assert [f.rule for f in found] == case["expect"], [f.message for f in found]
    if case.get("message"):
        assert case["message"] in found[0].message
    for f in found:
        assert f.try_next and 0 < f.share <= 1
