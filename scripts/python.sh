# Sourced by the scripts: PY is the Python that has sglops installed. Where the system Python is
# "externally managed" (PEP 668, Debian's own python3), sglops lives in .venv instead.
if [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
elif python3 -c 'import os, sys, sysconfig; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED")) else 1)' 2>/dev/null; then
  PY=.venv/bin/python
else
  PY=python3
fi
