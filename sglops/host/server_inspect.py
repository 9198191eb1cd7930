# What the host's SGLang tree accepts as launch arguments (read statically, never imported: the
# host python may have no torch), plus the server sglops started there, in one round trip.
import ast
import os
import re
import sys

from ._common import UserError, find_sglang, try_find_sglang
from ._server_engine import find_tree
from .server_common import entrypoint_server, our_server, read_json_file, state_paths

# The default engine's spec when the laptop sends none (an older caller): its flag files and checked choices.
DEFAULT_SPEC = {
    "flag_files": ["srt/server_args.py", "srt/arg_groups"],
    "arg_classes": [],
    "choice_flags": [
        "--attention-backend",
        "--prefill-attention-backend",
        "--decode-attention-backend",
        "--nsa-prefill-backend",
        "--nsa-decode-backend",
        "--dsa-prefill-backend",
        "--dsa-decode-backend",
        "--kv-cache-dtype",
        "--moe-runner-backend",
    ],
}


def _files(pkg, rels):
    for rel in rels:
        path = os.path.join(pkg, rel)
        if os.path.isfile(path):
            yield path
        for folder, _, names in os.walk(path):
            for name in sorted(names):
                if name.endswith(".py"):
                    yield os.path.join(folder, name)


def _strings(node, consts):
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        out = []
        for elt in node.elts:
            if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                out.append(elt.value)
            elif isinstance(elt, ast.Starred):
                out += _strings(elt.value, consts) or []
        return out
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _strings(node.left, consts), _strings(node.right, consts)
        return (left or []) + (right or []) if left is not None or right is not None else None
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "list" and node.args:
        return _strings(node.args[0], consts)
    return None


def _constants(trees):
    """Module-level lists of strings (e.g. ATTENTION_BACKEND_CHOICES), across all files; aliases resolved."""
    consts = {}
    # a few passes resolve NAME = OTHER_NAME chains across files
    for _ in range(3):
        for tree in trees:
            for node in tree.body:
                if (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                ):
                    val = _strings(node.value, consts)
                    if val is not None:
                        consts[node.targets[0].id] = val
    return consts


def _kw(call, name):
    return next((k.value for k in call.keywords if k.arg == name), None)


def launch_arguments(pkg, spec=None):
    """{flags, choices}: every --flag the engine's flag files define (add_argument calls, `A[...]` fields, and
    the fields of its argument dataclasses) and the choices of the flags a render checks."""
    spec = spec or DEFAULT_SPEC
    trees = []
    for path in _files(pkg, spec["flag_files"]):
        try:
            with open(path, encoding="utf-8") as fh:
                trees.append(ast.parse(fh.read(), path))
        except (OSError, SyntaxError):
            continue
    consts = _constants(trees)
    flags, choices = set(), {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                names = [
                    a.value
                    for a in node.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")
                ]
                flags.update(names)
                ch = _kw(node, "choices")
                vals = _strings(ch, consts) if ch is not None else None
                for n in names:
                    if vals:
                        choices[n] = vals
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    _field(item, consts, flags, choices)
                    if (
                        node.name in spec["arg_classes"]
                        and isinstance(item, ast.AnnAssign)
                        and isinstance(item.target, ast.Name)
                        and not item.target.id.startswith("_")
                    ):
                        flags.add("--" + item.target.id.replace("_", "-"))
    return sorted(flags), {k: v for k, v in choices.items() if k in spec["choice_flags"]}


def _field(item, consts, flags, choices):
    """A dataclass field `name: A[type, Arg(...)]` (0.5.15+ arg_groups): its CLI flag and choices."""
    if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
        return
    ann = item.annotation
    if not (isinstance(ann, ast.Subscript) and getattr(ann.value, "id", None) == "A"):
        return
    if item.target.id.startswith("_"):
        return
    arg = next(
        (n for n in ast.walk(ann) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Arg"), None
    )
    if arg is not None:
        no_cli = _kw(arg, "no_cli")
        if isinstance(no_cli, ast.Constant) and no_cli.value is True:
            return
    cli = _kw(arg, "cli_name") if arg is not None else None
    name = cli.value if isinstance(cli, ast.Constant) else "--" + item.target.id.replace("_", "-")
    names = [name] + (_strings(_kw(arg, "aliases"), consts) or [] if arg is not None else [])
    flags.update(names)
    ch = _kw(arg, "choices") if arg is not None else None
    vals = _strings(ch, consts) if ch is not None else None
    if vals:
        for n in names:
            choices[n] = vals


def tree_facts(pkg):
    mla = os.path.join(pkg, "srt", "layers", "attention", "flashinfer_mla_backend.py")
    try:
        with open(mla, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        text = ""
    return {
        "gather_cast": "sglops: gather-cast" in text,
        "whole_pool_cast": "get_key_buffer(layer.layer_id).to(q.dtype)" in text,
    }


def launch_host():
    """What a multi-rank launch on this host depends on: the CPUs this user may run on (thread binding per
    rank), the NUMA node count (SGLang's CPU engine binds one rank per node unless told) and whether this
    python finds an NCCL library (a CUDA torch build ships one; on a host with no GPU SGLang then loads it and
    fails)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    try:
        numa = len([n for n in os.listdir("/sys/devices/system/node") if re.fullmatch(r"node\d+", n)])
    except OSError:
        numa = None
    nccl = None
    for entry in sys.path:
        for rel in ("nvidia/nccl/lib", "torch/lib"):
            folder = os.path.join(entry or ".", rel)
            try:
                hit = next((n for n in sorted(os.listdir(folder)) if n.startswith("libnccl.so")), None)
            except OSError:
                continue
            if hit:
                nccl = os.path.join(folder, hit)
                break
        if nccl:
            break
    return {
        "cpus": cpus,
        "numa_nodes": numa,
        "nccl_library": nccl,
        "gpus_visible": os.path.exists("/dev/nvidia0"),
    }


def current(root):
    paths = state_paths(root, create=False)
    info = our_server(paths)
    return {
        "state_dir": os.path.dirname(paths["server.pid"]),
        "running": info is not None,
        "server": info,
        "last_good": read_json_file(paths["launch.last-good.json"])
        if os.path.exists(paths["launch.last-good.sh"])
        else None,
        "entrypoint": entrypoint_server(),
    }


def state_tree(args):
    """The tree whose state folder holds this host's server, whatever engine serves: the host's first engine
    found (the inventory tree, else each engine's package as the host python finds it), so one server per host
    is known to every command (stop, status, the next restart)."""
    found, why = try_find_sglang(args.get("sglang_root"))
    if found:
        return found
    for spec in args.get("engines") or []:
        try:
            return find_tree(spec, None, args.get("python"))
        except UserError:
            continue
    raise UserError(why)


def main(args):
    spec = args.get("engine")
    first = (args.get("engines") or [spec])[0]
    # the inventory's tree (sglang_root), as before engines
    if spec is None or spec == first:
        try:
            tree = find_sglang(args.get("sglang_root"))
            spec = spec or DEFAULT_SPEC
        # a host with another engine only (stop, status, logs name no engine): that one's tree
        except UserError:
            tree = None
            for other in (args.get("engines") or [])[1:]:
                try:
                    tree, spec = find_tree(other, None, args.get("python")), other
                    break
                except UserError:
                    continue
            if tree is None:
                raise
    else:
        tree = find_tree(spec, None, args.get("python"))
    flags, choices = launch_arguments(tree["package_dir"], spec)
    if not flags:
        raise UserError(
            "no launch arguments found in "
            + ", ".join(os.path.join(tree["package_dir"], rel) for rel in spec["flag_files"])
        )
    # the host's state folder: this tree's when the default engine was asked (or stood in for it), else the
    # host's first engine tree, so a server of either engine is found by the commands that name none
    state = tree if args.get("engine") in (None, first) else state_tree(args)
    keep = ("version", "root", "package_dir", "kind", "commit", "dirty")
    return {
        "sglang": {k: tree[k] for k in keep},
        "engine_tree": {k: tree[k] for k in keep},
        "engine": spec.get("name"),
        "state_root": state["root"],
        "flags": flags,
        "choices": choices,
        "tree": tree_facts(tree["package_dir"]),
        "current": current(state["root"]),
        "host": launch_host(),
    }
