#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: OpenSSH (the sandbox hosts are real sshd),
# ripgrep and git (probes, trees), sglops with its pinned Python packages, and the real SGLang
# server environment the real-server tests and the demo use (sglops/sandbox/sglang_cpu.py: its own
# venv with sglang 0.5.23 and a tiny model made offline; ~7 GB, built once per machine and cached
# in ~/.cache/sglops/server-env, or $SGLOPS_CACHE/server-env).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
need_apt=0
[ -x /usr/sbin/sshd ] || need_apt=1
command -v ssh-keygen >/dev/null || need_apt=1
command -v rg >/dev/null || need_apt=1
command -v git >/dev/null || need_apt=1
[ -x /usr/sbin/dockerd ] || need_apt=1   # a real Docker daemon for the container-target tests (started by the suite)
if [ "$need_apt" = 1 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    openssh-server openssh-client ripgrep git docker.io >/dev/null
fi
. scripts/python.sh
if [ "$PY" = .venv/bin/python ] && [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv 2>/dev/null || {
    $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    python3 -m venv .venv
  }
fi
"$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore -e ".[test]"
"$PY" -c "import sglops, fabric, invoke, torch" # fail here, not in the middle of a test run
t0=$SECONDS
if ! "$PY" -m sglops.sandbox.sglang_cpu >/dev/null; then
  if [ "${CI:-}" = true ]; then
    echo "setup: the real SGLang environment could not be built (see the line above)" >&2
    exit 1
  fi
  echo "setup: the real SGLang environment could not be built (no network?): the real-server tests will skip" >&2
elif [ $((SECONDS - t0)) -gt 10 ]; then
  echo "setup: real SGLang environment ready after $((SECONDS - t0)) s" >&2
fi
