#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: OpenSSH (the sandbox hosts are real sshd),
# ripgrep and git (probes, trees), sglops with its pinned Python packages in the checkout's own .venv (never the
# machine's Python: scripts/python.sh), and the real SGLang server environment the real-server tests and the demo
# use (sglops/sandbox/sglang_cpu.py: its own venv with sglang 0.5.23 and a tiny model made offline; ~7 GB, built
# once per machine and cached in ~/.cache/sglops/server-env, or $SGLOPS_CACHE/server-env).
#   scripts/setup.sh [test|demo]   test (default): sglops[test] (pytest, torch for the numeric tests, ruff) and
#                                  chromium (the HTML report's browser check); demo: sglops[demo] only
# The SGLang environment is the long step (~4 GB of wheels): uv (pinned in pyproject.toml's extras) installs
# it with parallel downloads, and it builds in the background while sglops' own packages install (with uv too:
# pip fetches torch's ~3 GB of wheels one at a time; pip remains the fallback) and the release wheels the sandbox
# hosts are made from download (in the background as well: they need only the standard library and pip). Each
# step's seconds go to stderr, so a CI log says where set-up's time goes.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-test}
case "$MODE" in test|demo) ;; *) echo "setup: unknown mode $MODE (test or demo)" >&2; exit 2 ;; esac
t_all=$SECONDS
took() { echo "setup: $1 in $(( SECONDS - $2 )) s" >&2; }
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
need_apt=0
[ -x /usr/sbin/sshd ] || need_apt=1
command -v ssh-keygen >/dev/null || need_apt=1
command -v rg >/dev/null || need_apt=1
command -v git >/dev/null || need_apt=1
[ -x /usr/sbin/dockerd ] || need_apt=1   # a real Docker daemon for the container-target tests (started by the suite)
APT=(openssh-server openssh-client ripgrep git docker.io)
if [ "$MODE" = test ]; then  # the HTML report's check in a real headless browser (tests/test_html_report.py)
  command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need_apt=1
  APT+=(chromium)
fi
if [ "$need_apt" = 1 ]; then
  t=$SECONDS
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${APT[@]}" >/dev/null
  took "apt-get install" $t
fi
. scripts/python.sh
t=$SECONDS
if [ ! -x "$PY" ] || ! _py_ok "$PY"; then make_venv; took ".venv made" $t; fi
PIP=("$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore)
UV_PIN=$(grep -o '"uv==[^"]*"' pyproject.toml | head -1 | tr -d '"')
t=$SECONDS
"$PY" -c "import uv" 2>/dev/null || { "${PIP[@]}" "$UV_PIN"; took "uv installed" $t; }

# the SGLang environment, in the background (python -m from the repo root: sglops needs no install for this step)
mkdir -p .cache
t_env=$SECONDS
setsid "$PY" -m sglops.sandbox.sglang_cpu >.cache/setup-sglang-env.log 2>&1 &
env_pid=$!

# --- the real vLLM CPU environment (sglops/sandbox/vllm_cpu.py, docs/vllm.md; issue 42), in the background too ---
t_vllm=$SECONDS
setsid "$PY" -m sglops.sandbox.vllm_cpu >.cache/setup-vllm-env.log 2>&1 &
vllm_pid=$!
# the vLLM release trees the vLLM probes read (tests/test_vllm_probes.py; Python files of ~760 MB of wheels)
setsid "$PY" -c "from sglops.sandbox.vllm_trees import vllm_site; [vllm_site(v) for v in ('0.10.2', '0.32.0')]" \
  >.cache/setup-vllm-trees.log 2>&1 &
vllm_trees_pid=$!
# --- end of the vLLM block ---

# the release wheels the sandbox hosts and the decision tests are made from, all at once (else one by one, mid-run),
# in the background too (standard library, sglops from the repo root and pip: nothing the next step installs)
t_trees=$SECONDS
setsid "$PY" - >.cache/setup-release-trees.log 2>&1 <<'EOF' &
from concurrent.futures import ThreadPoolExecutor

from sglops.sandbox import trees

jobs = [(trees.sglang_template, v) for v in ("0.5.23", "0.5.15", "0.5.17", "0.4.10")]
jobs += [(trees.flashinfer_site, v) for v in ("0.7.2", "0.6.12")]
with ThreadPoolExecutor(len(jobs)) as pool:
    for f in [pool.submit(fn, v) for fn, v in jobs]:
        f.result()
EOF
trees_pid=$!
# a failed step below stops both builds too (they resume next time)
trap 'kill -- -"$env_pid" 2>/dev/null || true; kill -- -"$trees_pid" 2>/dev/null || true' EXIT

t=$SECONDS
"$PY" -m uv pip install -q --compile-bytecode --python "$PY" -e ".[$MODE]" || {  # .pyc files as pip writes them
  echo "setup: uv could not install sglops' packages; pip instead" >&2
  "${PIP[@]}" -e ".[$MODE]"
}
if [ "$MODE" = test ]; then
  "$PY" -c "import sglops, fabric, invoke, torch, xdist" # fail here, not in the middle of a test run
else
  "$PY" -c "import sglops, fabric, invoke"
fi
took "sglops and its $MODE packages (.venv/bin/sglops, .venv/bin/inv)" $t

t=$SECONDS
if wait "$trees_pid"; then
  took "release trees ($(( SECONDS - t_trees )) s since they started), waited" $t
else
  tail -n 1 .cache/setup-release-trees.log >&2
  echo "setup: some release wheels could not be fetched now; the tests fetch them when they need them" >&2
fi

env_ok=0
t_wait=$SECONDS
wait "$env_pid" || env_ok=$?
trap - EXIT
if [ "$env_ok" != 0 ]; then
  tail -n 3 .cache/setup-sglang-env.log >&2
  if [ "${CI:-}" = true ]; then
    echo "setup: the real SGLang environment could not be built (see the line above)" >&2
    exit 1
  fi
  echo "setup: the real SGLang environment could not be built (no network?): the real-server tests will skip" >&2
else
  grep -h '^sglang_cpu: took' .cache/setup-sglang-env.log >&2 || true  # its own phases (a fresh build only)
  echo "setup: real SGLang environment ready ($(( SECONDS - t_wait )) s waited for it after the steps above;" \
    "$(( SECONDS - t_env )) s since it started)" >&2
fi
# --- the vLLM environment, waited for (tests/test_vllm_real.py fails, not skips, once set-up asked for it) ---
if wait "$vllm_pid"; then
  grep -h '^vllm_cpu: took' .cache/setup-vllm-env.log >&2 || true
  echo "setup: real vLLM environment ready ($(( SECONDS - t_vllm )) s since it started)" >&2
else
  tail -n 2 .cache/setup-vllm-env.log >&2
  echo "setup: the real vLLM environment could not be built: tests/test_vllm_real.py will fail" >&2
fi
wait "$vllm_trees_pid" || echo "setup: vLLM release trees not fetched now; tests/test_vllm_probes.py fetches them" >&2
# --- end of the vLLM block ---
took "set-up done" $t_all
