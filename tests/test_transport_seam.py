"""The kubectl seam, run: a pod-shaped target wrapping a transport carries real sglops steps.

docs/container.md says a pod container fits where the docker target fits: only the wrap of the shell line
(`kubectl exec -i POD -c CONTAINER -- ...`) and the identity probe (`kubectl get pod POD -o jsonpath=...`)
differ. Here a target written in this file alone (no change to sglops) is wrapped around each transport that
reaches a host (this machine, and a sandbox sshd host over SSH) through `ContainerRemote`, and real steps run
through it: `facts` (a host step whose bundle travels on stdin), files in and out, a timed-out command, a
missing pod.

The `kubectl` on the host is a small sh client with kubectl's command line: `exec -i POD -c CONTAINER --
CMD...` runs CMD in the pod's own root folder (its cwd and HOME) with a clean environment, as a container
would; `get pod POD -o jsonpath=...` prints the pod's container and image ids. It logs every call, so the test
sees each step reach the pod in exactly one `exec`.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from sglops.core.container import IDENTITY_ENV, IDENTITY_MARKER, ContainerRemote
from sglops.core.errors import RemoteError, RemoteTimeout
from sglops.core.hosts import Host, load_inventory
from sglops.core.remote import LocalRemote, Remote, SSHRemote
from sglops.probe import facts
from sglops.sandbox.sshd import HOST_PYTHON

POD, CONTAINER = "sglang-0", "server"
CONTAINER_ID, IMAGE_ID = "containerd://5f1e9c0ab7d2", "sha256:9d41be07c3aa"

FAKE_KUBECTL = r"""#!/bin/sh
pods=__PODS__
echo "$1 $3" >> "$pods/calls.log"
case "$1" in
exec)
  if [ "$2" != -i ] || [ "$4" != -c ] || [ "$6" != -- ]; then
    echo "error: expected exec -i POD -c C -- CMD" >&2; exit 2
  fi
  root="$pods/$3/$5"; shift 6
  if [ ! -d "$root" ]; then echo "Error from server (NotFound): pods \"$3\" not found" >&2; exit 1; fi
  cd "$root" && exec env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$root" "$@" ;;
get)
  if [ "$2" != pod ] || [ "$4" != -o ]; then
    echo "error: expected get pod POD -o jsonpath=..." >&2; exit 2
  fi
  if [ ! -d "$pods/$3" ]; then echo "Error from server (NotFound): pods \"$3\" not found" >&2; exit 1; fi
  cat "$pods/$3/identity" ;;
*) echo "error: unknown command \"$1\" for \"kubectl\"" >&2; exit 1 ;;
esac
"""


@dataclass(frozen=True)
class PodTarget:
    """A container of a Kubernetes pod, reached with `kubectl exec` on the host: the seam's other shape."""

    name: str
    container: str
    kubectl: str = "kubectl"
    engine: str = "kubectl"

    def identity_probe(self) -> str:
        path = (
            f'{{.status.containerStatuses[?(@.name=="{self.container}")].containerID}} '
            f'{{.status.containerStatuses[?(@.name=="{self.container}")].imageID}}'
        )
        return (
            f"$({shlex.quote(self.kubectl)} get pod {shlex.quote(self.name)} -o "
            f"{shlex.quote('jsonpath=' + path)} 2>/dev/null)"
        )

    def wrap(self, line: str, identity: str | None = None) -> str:
        head = f"{shlex.join([self.kubectl, 'exec', '-i', self.name, '-c', self.container, '--'])} env"
        if identity:
            return f"{head} {shlex.quote(f'{IDENTITY_ENV}={identity}')} sh -c {shlex.quote(line)}"
        return (
            f'_sglops_id="{self.identity_probe()}"; printf \'{IDENTITY_MARKER} %s\\n\' "$_sglops_id" >&2; '
            f'{head} {IDENTITY_ENV}="$_sglops_id" sh -c {shlex.quote(line)}'
        )

    def explain(self, host: str, stderr: str, exit_code: int) -> None:
        if "(NotFound)" in stderr:
            raise RemoteError(f"{host}: pod {self.name} not found ({stderr.strip().splitlines()[-1][:200]})")


@pytest.fixture
def pods(tmp_path: Path) -> Path:
    """The fake cluster: one pod with one container (its root folder and ids) and the kubectl client."""
    pods = tmp_path / "pods"
    (pods / POD / CONTAINER).mkdir(parents=True)
    (pods / POD / "identity").write_text(f"{CONTAINER_ID} {IMAGE_ID}\n")
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(FAKE_KUBECTL.replace("__PODS__", shlex.quote(str(pods))))
    kubectl.chmod(0o755)
    return pods


@pytest.fixture(params=["local", "ssh"])
def transport(request, use_sandbox, monkeypatch) -> Remote:
    """Each transport that reaches a host: this machine, and the sandbox host gpu-a over SSH."""
    # in this machine's environment, never in the pod's
    monkeypatch.setenv("SGLOPS_SEAM_LEAK", "leaked")
    inv = load_inventory(use_sandbox.inventory)
    gpu_a = inv.get("gpu-a")
    if request.param == "local":
        t: Remote = LocalRemote(
            Host(name="pod-host", address="local", python="python3", sglang_root=gpu_a.sglang_root)
        )
    else:
        t = SSHRemote(replace(gpu_a, name="pod-host", python="python3"), inventory=inv)
    yield t
    t.close()


def calls(pods: Path) -> list[str]:
    log = pods / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_facts_run_inside_the_pod_in_one_exec_with_its_identity(transport, pods):
    r = ContainerRemote(transport, PodTarget(POD, CONTAINER, kubectl=str(pods.parent / "kubectl")))
    doc = facts.gather(r).data
    # the probe's ids reached the host step
    assert doc["container"] == {"id": CONTAINER_ID, "image": IMAGE_ID}
    # read from the tree by the bundle that went over stdin
    assert doc["sglang"]["version"] == "0.5.23"
    assert calls(pods) == [f"get {POD}", f"exec {POD}"], "first step: the identity probe, then one exec"
    assert r.round_trips == transport.round_trips == 1
    probe = ["sh", "-c", 'echo "$PWD|$HOME|${SGLOPS_SEAM_LEAK:-clean}|$SGLOPS_CONTAINER|$X"']
    out = r.run(probe, env={"X": 'it\'s "quoted" $HOME'}).stdout.strip()
    root = str(pods / POD / CONTAINER)
    assert out == f'{root}|{root}|clean|{CONTAINER_ID} {IMAGE_ID}|it\'s "quoted" $HOME'
    assert calls(pods)[2:] == [f"exec {POD}"], "a later step reuses the identity: one exec, no probe"
    assert r.round_trips == 2
    # the same command on the host itself sees the host's environment
    if isinstance(transport, LocalRemote):
        assert transport.run(probe).stdout.split("|")[2] == "leaked"


def test_files_in_and_out_through_the_pod_exec_stream(transport, pods, tmp_path):
    r = ContainerRemote(transport, PodTarget(POD, CONTAINER, kubectl=str(pods.parent / "kubectl")))
    data = os.urandom(200_000) + b"\n\x00end"
    (tmp_path / "up.bin").write_bytes(data)
    # relative: lands in the pod's root, its cwd
    r.put(tmp_path / "up.bin", "kernels/k.bin")
    inside = pods / POD / CONTAINER / "kernels" / "k.bin"
    assert inside.read_bytes() == data and not inside.with_name("k.bin.sglops-tmp").exists()
    r.get("kernels/k.bin", tmp_path / "down" / "k.bin")
    assert (tmp_path / "down" / "k.bin").read_bytes() == data
    assert [c.split()[0] for c in calls(pods)] == ["get", "exec", "exec"], "one exec per file, nothing else"


def test_a_timed_out_step_is_stopped_inside_the_pod(transport, pods):
    r = ContainerRemote(transport, PodTarget(POD, CONTAINER, kubectl=str(pods.parent / "kubectl")))
    # a sleep no other test runs
    seconds = f"{30 + os.getpid() % 997 / 1000:.3f}"
    with pytest.raises(RemoteTimeout, match="timed out after 1 s"):
        r.run(["sleep", seconds], timeout=1)
    left = subprocess.run(["pgrep", "-f", f"sleep {seconds}"], capture_output=True, text=True).stdout.split()
    assert left == [], "the pod's `timeout` stopped the step"


def test_a_missing_pod_is_one_clear_line_and_host_steps_bypass_the_pod(transport, pods):
    r = ContainerRemote(transport, PodTarget("gone-0", CONTAINER, kubectl=str(pods.parent / "kubectl")))
    with pytest.raises(RemoteError) as err:
        facts.gather(r)
    assert str(err.value).startswith("pod-host: pod gone-0 not found (Error from server (NotFound)")
    assert "\n" not in str(err.value)
    before = calls(pods)
    # the host's own python3
    doc = r.run_py("facts", {"sglang_root": None, "port": None}, on_host=True)
    assert doc["container"] is None and calls(pods) == before, "on_host goes to the transport, not the pod"
    assert r.round_trips == transport.round_trips == 2


def test_the_wrapper_is_the_same_for_docker_and_kubectl():
    """connect() builds the docker/podman target the same
    way: a ContainerRemote around the host's transport."""
    from sglops.core.container import ContainerTarget
    from sglops.core.remote import connect

    r = connect(
        Host(name="h", address="local", python=HOST_PYTHON, container="sglang", container_engine="podman")
    )
    assert isinstance(r, ContainerRemote) and isinstance(r.transport, LocalRemote)
    assert r.container == ContainerTarget("sglang", "podman") and r.host_side() is r.transport
