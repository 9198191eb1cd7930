"""What the served tree's decode path does to the FP8 KV pool, found by running the tree's own code.

The stand-in server has no GPU and no torch, so it cannot time attention. What it can do honestly is run the
served `flashinfer_mla_backend.py`'s own decode KV code, the expression that makes `k_buffer` in
`forward_decode` and every module-level hook that rewrites `kv_indices` before `wrapper.plan`, on counting
tensors: a stdlib stand-in for the few tensor operations that code uses, which records how many KV elements it
converts. A patch that keeps a marker comment but breaks the code fails here, as it would at a real server's
warm-up; a patch that still converts the whole pool gets no faster.

The step time is then a MODEL, and every constant of it is the stand-in's, not a measurement:
GLM-5's seed investigation (78 layers, a 495K x 576 FP8 pool, 10.5 tok/s with the whole-pool cast taking 69%
of the step) fixes the time per converted element and the rest of the step. Figures computed from it are
labelled "set by the stand-in" wherever sglops prints them.
"""

from __future__ import annotations

import ast
import os

# -- the model's constants (the seed investigation's GLM-5 on 8x SM120; NOT measured by the stand-in) --------
LAYERS = 78
POOL_ROWS = 495_000
# kv_lora_rank 512 + rope 64
ROW_ELEMS = 576
# tok/s with the whole-pool cast
SEED_RATE = 10.5
# of the decode step
SEED_CAST_SHARE = 0.69
_STEP = 1.0 / SEED_RATE
SECONDS_PER_ELEMENT = SEED_CAST_SHARE * _STEP / (LAYERS * POOL_ROWS * ROW_ELEMS)
REST_OF_STEP = (1 - SEED_CAST_SHARE) * _STEP
MLA_FILE = os.path.join("srt", "layers", "attention", "flashinfer_mla_backend.py")


class ServedCodeError(RuntimeError):
    """The served decode KV code does not run (what a real server would hit at warm-up)."""


# -- counting tensors ----------------------------------------------------------------------------------------
class DType:
    def __init__(self, name: str, size: int, floating: bool) -> None:
        self.name, self.itemsize, self.is_floating_point = name, size, floating

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class Meter:
    def __init__(self) -> None:
        # elements converted to another dtype
        self.converted = 0
        # elements copied by an index gather
        self.gathered = 0


class CountingTensor:
    """Rows of `width` elements; records the work done on it in a shared Meter."""

    # what the served code runs on: a GPU host's pool
    is_cuda = True

    def __init__(self, rows: int, width: int, dtype: DType, meter: Meter, device: str = "cuda") -> None:
        self.rows, self.width, self.dtype, self.meter, self.device = rows, width, dtype, meter, device

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.rows, 1, self.width) if self.width > 1 else (self.rows,)

    def numel(self) -> int:
        return self.rows * self.width

    def element_size(self) -> int:
        return self.dtype.itemsize

    def dim(self) -> int:
        return len(self.shape)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def _like(self, rows: int | None = None, dtype: DType | None = None) -> CountingTensor:
        return CountingTensor(
            self.rows if rows is None else rows, self.width, dtype or self.dtype, self.meter, self.device
        )

    def to(self, dtype=None, *args, **kwargs) -> CountingTensor:
        dtype = kwargs.get("dtype", dtype)
        if isinstance(dtype, DType) and dtype is not self.dtype:
            self.meter.converted += self.numel()
            return self._like(dtype=dtype)
        return self

    def view(self, *shape) -> CountingTensor:
        if len(shape) == 1 and isinstance(shape[0], DType):
            # a reinterpretation: same bytes, no work
            return self._like(dtype=shape[0])
        return self

    def long(self) -> CountingTensor:
        return self._like(dtype=INT64)

    def int(self) -> CountingTensor:
        return self._like(dtype=INT32)

    def contiguous(self) -> CountingTensor:
        return self

    def copy_(self, other) -> CountingTensor:
        return self

    def __len__(self) -> int:
        return self.rows

    def __setitem__(self, index, value) -> None:
        """A store into an allocated buffer: the work was counted where the value was made."""

    def __getitem__(self, index) -> CountingTensor:
        first = index[0] if isinstance(index, tuple) else index
        # an index gather: rows copied out of the pool
        if isinstance(first, CountingTensor):
            self.meter.gathered += first.rows * self.width
            return self._like(rows=first.rows)
        if isinstance(first, slice):
            return self._like(rows=len(range(*first.indices(self.rows))))
        if isinstance(first, int):
            return self._like(rows=1)
        return self


FLOAT8 = DType("float8_e4m3fn", 1, True)
BF16 = DType("bfloat16", 2, True)
UINT8 = DType("uint8", 1, False)
INT32 = DType("int32", 4, False)
INT64 = DType("int64", 8, False)


class CountingTorch:
    """The `torch` the served helpers see: dtypes and the constructors they call."""

    float8_e4m3fn, bfloat16, uint8, int32, int64 = FLOAT8, BF16, UINT8, INT32, INT64
    float16 = DType("float16", 2, True)
    float32 = DType("float32", 4, True)
    Tensor = CountingTensor

    def __init__(self, meter: Meter) -> None:
        self.meter = meter

    def arange(self, n, *args, dtype=None, device=None, **kwargs) -> CountingTensor:
        return CountingTensor(int(n), 1, dtype or INT64, self.meter)

    def empty(self, *shape, dtype=None, device=None, **kwargs) -> CountingTensor:
        dims = tuple(shape[0]) if shape and isinstance(shape[0], (tuple, list)) else shape
        width = 1
        for d in dims[1:]:
            width *= int(d)
        return CountingTensor(int(dims[0]) if dims else 0, width, dtype or BF16, self.meter)

    class cuda:  # noqa: N801 (torch.cuda)
        @staticmethod
        def is_current_stream_capturing() -> bool:
            # the stand-in decodes eagerly
            return False

        @staticmethod
        def is_available() -> bool:
            return True

    def is_tensor(self, obj) -> bool:
        return isinstance(obj, CountingTensor)


class _Obj:
    def __init__(self, **attrs) -> None:
        self.__dict__.update(attrs)


# -- the served code -----------------------------------------------------------------------------------------
def _module_functions(tree: ast.Module) -> list[ast.stmt]:
    return [n for n in tree.body if isinstance(n, ast.FunctionDef)]


def _try_assigned_names(tree: ast.Module) -> set[str]:
    """Names a module-level try/except binds (optional kernels): absent on a host without them."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Try):
            for sub in ast.walk(node):
                if isinstance(sub, ast.alias):
                    names.add(sub.asname or sub.name.split(".")[0])
                elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.add(sub.id)
    return names


def _decode_k_buffer(tree: ast.Module) -> ast.expr:
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "forward_decode":
                for node in ast.walk(fn):
                    if (
                        isinstance(node, ast.Assign)
                        and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Name)
                        and node.targets[0].id == "k_buffer"
                    ):
                        return node.value
    raise ServedCodeError(f"{MLA_FILE}: no `k_buffer = ...` in a forward_decode")


def _plan_hooks(tree: ast.Module, functions: set[str]) -> list[tuple[str, bool]]:
    """Module-level functions the decode indices updater calls with a wrapper first, before planning:
    (name, whether its result replaces kv_indices). E.g. `kv_indices = f(wrapper, kv_indices, ...)` or
    `f(wrapper, kv_indices, kv_indptr, enable)`."""
    hooks: list[tuple[str, bool]] = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and "Decode" in n.name):
        for node in ast.walk(cls):
            call = node.value if isinstance(node, (ast.Assign, ast.Expr)) else None
            if not (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id in functions
                and call.args
                and isinstance(call.args[0], ast.Name)
                and "wrapper" in call.args[0].id
            ):
                continue
            replaces = (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "kv_indices"
            )
            hooks.append((call.func.id, replaces))
    return hooks


def _hook_args(fn, wrapper: _Obj, indices: CountingTensor, meter: Meter) -> list:
    """Arguments for a plan hook by its parameter names: the
    wrapper, this plan's indices and indptr; flags on."""
    code = fn.__code__
    args = []
    for name in code.co_varnames[: code.co_argcount]:
        if "wrapper" in name:
            args.append(wrapper)
        elif name == "kv_indices":
            args.append(indices)
        elif name == "kv_indptr":
            args.append(CountingTensor(2, 1, INT32, meter))
        else:
            args.append(True)
    return args


def decode_kv_elements(pkg: str, live_rows: int) -> tuple[int, int]:
    """(elements converted, elements gathered) per layer per decode step of one request with `live_rows` KV
    rows, by running the served tree's own decode KV code on counting tensors."""
    path = os.path.join(pkg, MLA_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
    except OSError as exc:
        raise ServedCodeError(f"cannot read {path}: {exc}") from None
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise ServedCodeError(f"{path}:{exc.lineno}: SyntaxError: {exc.msg}") from None
    meter = Meter()
    namespace: dict = {"torch": CountingTorch(meter), "__name__": "served_flashinfer_mla_backend"}
    namespace.update(dict.fromkeys(_try_assigned_names(tree)))
    functions = _module_functions(tree)
    exec(compile(ast.Module(body=functions, type_ignores=[]), path, "exec"), namespace)  # noqa: S102
    wrapper = _Obj(_use_cuda_graph=False)
    indices = CountingTensor(live_rows, 1, INT32, meter)
    try:
        for name, replaces in _plan_hooks(tree, {f.name for f in functions}):
            out = namespace[name](*_hook_args(namespace[name], wrapper, indices, meter))
            indices = out if replaces else indices
        pool = CountingTensor(POOL_ROWS, ROW_ELEMS, FLOAT8, meter)
        scope = {
            "self": _Obj(
                token_to_kv_pool=_Obj(get_key_buffer=lambda layer_id: pool),
                forward_metadata=_Obj(decode_wrapper=wrapper),
            ),
            "layer": _Obj(layer_id=0, v_head_dim=512, tp_q_head_num=16, head_dim=ROW_ELEMS),
            "q": CountingTensor(1, 16 * ROW_ELEMS, BF16, meter),
            "decode_wrapper": wrapper,
            "forward_batch": _Obj(),
        }
        expr = ast.Expression(body=_decode_k_buffer(tree))
        eval(compile(expr, path, "eval"), namespace, scope)  # noqa: S307
    except ServedCodeError:
        raise
    # the served code breaks on the decode path: a warm-up crash on a real server
    except Exception as exc:
        raise ServedCodeError(f"{path}: the decode KV code fails: {type(exc).__name__}: {exc}") from None
    return meter.converted, meter.gathered


def step_model(pkg: str, live_rows: int = 4096) -> dict:
    """The stand-in's decode step for the served tree: its rate and the cast's share, from the model above."""
    converted, gathered = decode_kv_elements(pkg, live_rows)
    kv_time = LAYERS * (converted + gathered) * SECONDS_PER_ELEMENT
    step = REST_OF_STEP + kv_time
    return {
        "rate": 1.0 / step,
        "cast_share": kv_time / step,
        "converted_per_layer": converted,
        "gathered_per_layer": gathered,
        "whole_pool_cast": converted >= POOL_ROWS * ROW_ELEMS,
        "live_rows": live_rows,
        "set_by": "stand-in model",
    }
