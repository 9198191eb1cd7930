"""The shape of the code, for closing notes: the 5 longest functions and the share over 50 lines.

    python3 benchmarks/code_shape.py [PACKAGE_DIR]    # default: sglops/

A function's length is its `def` line to its last line (nested functions counted on their own too, and inside
their parent), as ast reports them; tests and benchmarks are not walked. Why 50: the line the relayout issue
(#22) measured pyinfra (8.7%) and Fabric (7.1%) against.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LONG = 50


def functions(package: Path) -> list[tuple[int, str]]:
    """(lines, path:line name) of every function and method under package."""
    out = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                out.append((lines, f"{path.relative_to(package.parent)}:{node.lineno} {node.name}"))
    return out


def main(argv: list[str]) -> int:
    package = Path(argv[1]) if len(argv) > 1 else REPO / "sglops"
    found = functions(package)
    if not found:
        print(f"no functions under {package}", file=sys.stderr)
        return 2
    longest = sorted(found, key=lambda f: (-f[0], f[1]))[:5]
    over = sum(1 for n, _ in found if n > LONG)
    print(f"{len(found)} functions under {package.name}/; the 5 longest:")
    for n, where in longest:
        print(f"  {n:4d} lines  {where}")
    print(f"over {LONG} lines: {over} of {len(found)} ({100 * over / len(found):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
