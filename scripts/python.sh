# Sourced by the scripts: PY is the project's own interpreter, always .venv/bin/python in the checkout, whatever
# Python the machine has (pyenv, Debian's own with PEP 668, an activated venv): set-up never installs into it.
# make_venv makes .venv from $SGLOPS_PYTHON, else the first python3 / python3.1x on PATH that is >= 3.11.
PY=.venv/bin/python

_py_ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; }

make_venv() {
  if [ -x "$PY" ] && _py_ok "$PY"; then return 0; fi
  local base="${SGLOPS_PYTHON:-}" c
  if [ -z "$base" ]; then
    for c in python3 python3.13 python3.12 python3.11; do
      if command -v "$c" >/dev/null && _py_ok "$c"; then base=$(command -v "$c"); break; fi
    done
  fi
  if [ -z "$base" ] || ! _py_ok "$base"; then
    echo "setup: no Python >= 3.11 found${base:+ ($base is older)}; install one or set SGLOPS_PYTHON" >&2
    return 2
  fi
  rm -rf .venv
  if ! "$base" -m venv .venv >/dev/null 2>&1; then  # Debian's python3 without python3-venv (no ensurepip)
    rm -rf .venv
    if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then sudo apt-get install -y -qq python3-venv >/dev/null
    else apt-get install -y -qq --no-install-recommends python3-venv >/dev/null; fi
    "$base" -m venv .venv || { echo "setup: $base -m venv failed" >&2; return 2; }
  fi
  echo "setup: .venv made from $base ($("$PY" -c 'import platform; print(platform.python_version())'))" >&2
}
