#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: OpenSSH (the sandbox hosts are real sshd),
# ripgrep and git (probes, trees), and sglops with its pinned Python packages.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
need_apt=0
[ -x /usr/sbin/sshd ] || need_apt=1
command -v ssh-keygen >/dev/null || need_apt=1
command -v rg >/dev/null || need_apt=1
command -v git >/dev/null || need_apt=1
if [ "$need_apt" = 1 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    openssh-server openssh-client ripgrep git >/dev/null
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
