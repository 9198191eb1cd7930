"""Kernel and op names a person can read in a chart or a table row, cut only where a word ends.

Why: a CUDA kernel's name is its whole C++ signature (700+ characters for a torch copy kernel); a
chart label or table cell needs the base name and what tells variants apart (the functor, the
dtype). Cutting at a fixed width left half-words ("vectorized_elementwise_ker"); here a name is cut
only at a word boundary and marked with an ellipsis, and the full name stays in the JSON and in
the reports' name lists.
"""

from __future__ import annotations

import re

ELLIPSIS = "…"
KERNEL_WIDTH = 72
# a word longer than this is cut inside it: a 60 MB name is not one table cell
WORD_CAP = 256
# the widest name a table cell shows (the JSON keeps every name whole)
CELL = 160
# C0 controls, DEL and C1 controls as visible escapes: a name from a trace never moves the cursor or recolours
# the terminal (ESC, BEL, CR, backspace), and a newline never splits a table row
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
# Namespaces that say nothing about which library ran the kernel (torch's own, the standard library).
_GENERIC_NS = {
    "at",
    "native",
    "c10",
    "std",
    "detail",
    "cuda",
    "impl",
    "internal",
    "vectorized",
    "binary_internal",
}
_SEPARATORS = set("_:,; <>()[]{}/.-+*&|=#")


def shorten(text: str, width: int) -> str:
    """text cut to at most `width` characters at a word boundary, with an ellipsis when cut.

    A word boundary is a separator (underscore, `::`, comma, space, brackets...): the kept part ends
    on a whole word and its trailing separators are dropped. A first word longer than width is kept
    whole (never cut mid-word), so the result may exceed width only then.
    """
    if len(text) <= width:
        return text
    room = max(1, width - len(ELLIPSIS))
    cut = None
    for i in range(room, 0, -1):
        if text[i] in _SEPARATORS and text[i - 1] not in _SEPARATORS:
            cut = i
            break
    # one word longer than width: keep it whole, up to WORD_CAP
    if cut is None:
        m = _SEPARATOR_RE.search(text, 0, WORD_CAP + 1)
        if not m:
            return text if len(text) <= WORD_CAP else text[: max(width, 1)] + ELLIPSIS
        cut = m.start()
    return text[:cut].rstrip("".join(_SEPARATORS)) + ELLIPSIS


_SEPARATOR_RE = re.compile(r"[" + re.escape("".join(sorted(_SEPARATORS))) + r"]")


_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f]")
FULL_NAME_CAP = 4096
# short_kernel reads this much of a name # a report lists a full name up to this; analysis.json keeps it whole
READ_CAP = 8192


def printable(text: str) -> str:
    """text with terminal control characters shown as `\\x1b` escapes (a C-speed scan; translated only when
    there is something to escape)."""
    return text.translate(_CONTROLS) if _CONTROL_RE.search(text) else text


def cell(text: str, width: int = CELL) -> str:
    """A name from a trace as a view shows it: cut at a word boundary to `width`, controls escaped."""
    return printable(shorten(text, width))


def _depth0_cut(s: str) -> int:
    """Index of the first '<' or '(' (where the template arguments or the parameters start)."""
    cuts = [i for i in (s.find("<"), s.find("(")) if i > 0]
    return min(cuts) if cuts else len(s)


def _base(qualified: str) -> str:
    """The function name with generic namespaces dropped (at::native::x -> x; cublasLt::x stays)."""
    parts = [p for p in qualified.split("::") if p]
    if len(parts) <= 1:
        return qualified
    lib = [p for p in parts[:-1] if p not in _GENERIC_NS]
    return "::".join([lib[0], parts[-1]]) if lib else parts[-1]


def short_kernel(name: str, width: int = KERNEL_WIDTH) -> str:
    """A kernel name a person can read: base name plus the functor/dtype that tells variants apart.

    `void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, ...>(...)`
    -> `vectorized_elementwise_kernel[CUDAFunctor_add, BFloat16]`; namespaces that name no library
    (at::native, c10, std) are dropped, a library's (cublasLt::, flashinfer::) is kept; the result is
    cut at a word boundary to `width`.
    """
    # real names are < 2 KB; a 60 MB one is read no further than this
    name = name[:READ_CAP]
    s = (name[5:] if name.startswith("void ") else name).replace("(anonymous namespace)::", "").strip()
    cut = _depth0_cut(s)
    base = _base(s[:cut])
    inner = s[cut:]
    bits = _variant_bits(inner)
    full = f"{base}[{', '.join(bits)}]" if bits else base
    # keep the dtype: drop the functor's `_kernel_cuda` suffix before cutting
    if len(full) > width and bits:
        full = f"{base}[{', '.join(re.sub(r'(_kernel)?_cuda$', '', b) for b in bits)}]"
    return shorten(full, width)


def _variant_bits(inner: str) -> list[str]:
    """What tells a kernel's variants apart, from its template arguments: torch's functor and dtype."""
    m = re.search(
        r"at::native::(\w+(?:_kernel_cuda|Functor_\w+|Functor|_scalar))(?:<(c10::\w+|float|double|int|long))?",
        inner,
    )
    bits = [g.replace("c10::", "") for g in m.groups() if g] if m else []
    if len(bits) < 2:
        m = re.search(r"lambda\((c10::\w+|float|double|int|long|bool|short)\)#", inner)
        if m:
            bits.append(m.group(1).replace("c10::", ""))
    # a plain template: its first argument when it is a type
    if not bits and inner.startswith("<"):
        m = re.match(r"<\s*(c10::\w+|float|double|half|__nv_bfloat16|__half|int|long|bool)\s*[,>]", inner)
        if m:
            bits.append(m.group(1).replace("c10::", ""))
    return bits


def full_names_markdown(names: list[str], width: int = KERNEL_WIDTH) -> list[str]:
    """A collapsed list (markdown) of the names a table
    shows shortened: `short`: full name, in table order."""
    rows = [(short_kernel(n, width), n) for n in dict.fromkeys(names)]
    rows = [(s, n) for s, n in rows if s != n and s != n.removeprefix("void ")]
    if not rows:
        return []
    return [
        "",
        "<details><summary>full kernel names</summary>",
        "",
        *[f"- `{s}`: `{_capped(n).replace('`', chr(39))}`" for s, n in rows],
        "",
        "</details>",
    ]


def _capped(name: str) -> str:
    if len(name) <= FULL_NAME_CAP:
        return name
    return f"{name[:FULL_NAME_CAP]}{ELLIPSIS} ({len(name):,} characters; whole in analysis.json)"
