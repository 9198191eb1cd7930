"""Drive sglops' own build-kernel flow on this machine (`--host local`), then use what it installed.

Run on a GPU host from the repo root (this is how BENCH.md's end-to-end line was made):
    SGLOPS_ARTIFACTS=/tmp/art python kernels/gather_cast/e2e_local.py /tmp/kt OUT_DIR
"""

import json
import os
import subprocess
import sys

from sglops.core.hosts import Host
from sglops.core.remote import LocalRemote
from sglops.kernel import build as kernels


def main() -> None:
    target, out = sys.argv[1], sys.argv[2]
    remote = LocalRemote(Host(name="local", address="local", python=sys.executable))
    spec = kernels.load_kernel("gather_cast")
    first = kernels.build(remote, spec, target=target)
    again = kernels.build(remote, spec, target=target)
    print("first:", first.status, first.arch, "| again:", again.status, flush=True)
    for stage in ("build", "selftest"):
        with open(os.path.join(out, f"e2e_{stage}.log"), "w") as fh:
            fh.write(first.answer["stages"][stage]["log"])
    check = (
        "import torch, sglops_kernels.gather_cast as m; p = torch.randint(0, 256, (100000, 1, 576),"
        " dtype=torch.uint8, device='cuda'); i = torch.randint(0, 100000, (4096,), device='cuda',"
        " dtype=torch.int32); o = m.gather_cast(p, i); r = p.view(torch.float8_e4m3fn)[i].to(torch.bfloat16);"
        " print(m.backend(p), m.__file__, torch.equal(o.view(torch.int16), r.view(torch.int16)))"
    )
    used = subprocess.run(
        [sys.executable, "-c", check],
        env={**os.environ, "PYTHONPATH": target},
        capture_output=True,
        text=True,
    )
    print("installed module:", used.stdout.strip(), used.stderr.strip()[-300:], flush=True)
    gone = kernels.uninstall(remote, "gather_cast")
    print("uninstall:", gone.answer["status"], "left:", os.listdir(target), flush=True)
    with open(os.path.join(out, "e2e.json"), "w") as fh:
        json.dump(
            {
                "first": first.to_json(),
                "again": again.to_json(),
                "import_check": used.stdout.strip(),
                "uninstall": gone.to_json(),
            },
            fh,
            indent=1,
        )


if __name__ == "__main__":
    main()
