"""Standard-library Python modules that run ON the host, one round trip per script.

A script defines `main(args: dict) -> JSON-able` and imports its helpers like any module
(`from ._common import UserError, sh`). The laptop sends the script and the modules it imports
as one bundle over stdin (sglops/core/host_bundle.py), so hosts need nothing installed. This file
is sent too: it stays stdlib-only and Python 3.8 compatible, like every module here.
"""
