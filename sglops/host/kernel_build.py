# Build, self-test and install a kernel on this host, or uninstall / list what sglops installed.
#
# State lives in the tree's sglops state (sglops_dir)/kernels/: builds/<name>/<tag>/
# holds each build tree and its logs, installed.json records what is installed where. An install
# is a versioned copy `.<leaf>-<tag>` beside a symlink `<leaf>` that is swapped in one rename,
# so importers see the old version or the new one, never half of either.
import base64
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time

from ._common import PRIVATE_DIR, UserError, find_sglang, open_private, progress, sglops_dir, sh

LOG_CAP = 200_000
ERROR_RE = re.compile(r"error|Error|ERROR|FAILED|Traceback|Exception|assert|undefined reference|fatal")


def state_dir(hint):
    try:
        root = find_sglang(hint)["root"]
    except UserError:
        root = os.path.expanduser("~")
    return os.path.join(sglops_dir(root, create=False), "kernels")


def target_dir(target, hint):
    if target == "site-packages":
        return sysconfig.get_paths()["purelib"]
    if target == "sglang":
        return os.path.dirname(find_sglang(hint)["package_dir"])
    path = os.path.expanduser(target)
    if not os.path.isabs(path):
        raise UserError(
            "install target must be site-packages, sglang or an absolute path, not " + repr(target)
        )
    return path


def read_records(state):
    """installed.json: {} when there is none yet; a corrupt one is a one-line error (never {}: that
    would forget what is installed and let the next build overwrite it)."""
    path = os.path.join(state, "installed.json")
    try:
        with open(path) as fh:
            records = json.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise UserError(
            "kernel record " + path + " is unreadable (" + str(exc) + "); fix or move it aside"
        ) from None
    if not isinstance(records, dict):
        raise UserError("kernel record " + path + " is not a JSON object; fix or move it aside")
    return records


def write_records(state, records):
    path = os.path.join(state, "installed.json")
    with open_private(path + ".tmp", "w") as fh:
        json.dump(records, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(path + ".tmp", path)


def lock(state):
    """The kernel lock; records are read only after it is taken (mutations only: dry runs and the list
    read without it and create nothing)."""
    parent = os.path.dirname(state)
    if os.path.basename(parent) == ".sglops":
        # <checkout>/.sglops, 0700, with its .gitignore
        sglops_dir(os.path.dirname(parent))
    os.makedirs(state, mode=PRIVATE_DIR, exist_ok=True)
    fh = open_private(os.path.join(state, ".lock"), "w")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise UserError(
            "another sglops kernel build or uninstall is running on this host (" + state + ")"
        ) from None
    return fh


def run_logged(argv, cwd, env, timeout, log_path):
    """Run argv with stdout+stderr into log_path; (exit code, seconds, log text)."""
    start = time.monotonic()
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(argv) + "\n").encode())
        log.flush()
        try:
            code = subprocess.run(
                argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except FileNotFoundError:
            log.write((argv[0] + ": not found\n").encode())
            code = 127
        except subprocess.TimeoutExpired:
            log.write(("timed out after " + str(timeout) + " s\n").encode())
            code = 124
    with open(log_path, "rb") as fh:
        text = fh.read().decode(errors="replace")
    return code, round(time.monotonic() - start, 3), text[-LOG_CAP:]


def error_lines(text, limit=8):
    """The log's error lines (each Python error with the `File ..., line N` above it), else its tail."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()][1:]
    hits = []
    for i, ln in enumerate(lines):
        if not ERROR_RE.search(ln) or ln.startswith("Traceback (most recent call last)"):
            continue
        if re.match(r"\w*(Error|Exception)\b", ln):
            where = next(
                (x.strip() for x in reversed(lines[max(0, i - 6) : i]) if x.strip().startswith('File "')),
                None,
            )
            if where and where not in hits:
                hits.append(where)
        hits.append(ln)
    return (hits or lines[-5:])[-limit:]


def plan(args):
    hint = args.get("sglang_root")
    target = target_dir(args["target"], hint)
    rel = args["package"]
    parent, leaf = os.path.split(rel)
    tag = args["hash"][:12] + "-" + args["arch"]
    return {
        "state_dir": state_dir(hint),
        "target_dir": target,
        "install_path": os.path.join(target, rel),
        "module": rel.replace("/", "."),
        "tag": tag,
        "python": sys.executable,
    }


def installed_ok(rec, p):
    path = p["install_path"]
    return (
        bool(rec)
        and rec.get("install_path") == path
        and os.path.islink(path)
        and os.readlink(path) == rec.get("link_to")
        and os.path.isdir(path)
    )


def writable(path):
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return os.access(path, os.W_OK)


def swap_link(path, link_to):
    tmp = path + ".sglops-link"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(link_to, tmp)
    os.replace(tmp, path)


def build(args):
    p = plan(args)
    if args.get("dry_run"):
        records = read_records(p["state_dir"])
        rec = records.get(args["name"])
        return decide(args, p, records) or {
            "status": "would-build",
            **p,
            "previous": rec and {k: rec.get(k) for k in ("hash", "arch")},
        }
    held = lock(p["state_dir"])
    try:
        records = read_records(p["state_dir"])
        done = decide(args, p, records)
        if not done and not writable(os.path.dirname(p["install_path"])):
            raise UserError("install target " + p["target_dir"] + " is not writable; pass --target PATH")
    except BaseException:
        held.close()
        raise
    if done:
        held.close()
        return done
    return _build_locked(args, p, records, held)


def decide(args, p, records):
    """The answer when there is nothing to build (unchanged), or None; refuses a path not ours."""
    name, path = args["name"], p["install_path"]
    rec = records.get(name)
    same = rec and rec.get("hash") == args["hash"] and rec.get("arch") == args["arch"]
    if same and installed_ok(rec, p) and not args.get("force"):
        return {"status": "unchanged", **p, "installed_at": rec.get("installed_at")}
    if os.path.lexists(path) and not (rec and rec.get("install_path") == path and os.path.islink(path)):
        raise UserError(
            path + " exists and was not installed by sglops; remove it or pick another install target"
        )
    return None


def _build_locked(args, p, records, held):
    name, path = args["name"], p["install_path"]
    rec = records.get(name)
    builds = os.path.join(p["state_dir"], "builds", name)
    final = os.path.join(builds, p["tag"])
    work = final + ".tmp-" + str(os.getpid())
    os.makedirs(work)
    out = {"status": "failed", **p, "build_dir": final, "stages": {}}
    try:
        for rel, blob in sorted(args["files"].items()):
            dest = os.path.join(work, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as fh:
                fh.write(base64.b64decode(blob))
        env = dict(os.environ)
        env["PYTHONPATH"] = work + ((":" + env["PYTHONPATH"]) if env.get("PYTHONPATH") else "")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        for stage in ("build", "selftest"):
            spec = args[stage]
            progress(stage=stage)
            code, secs, text = run_logged(
                spec["argv"],
                work,
                {**env, **spec.get("env", {})},
                spec["timeout"],
                os.path.join(work, stage + ".log"),
            )
            out["stages"][stage] = {"exit": code, "seconds": secs, "log": text}
            if code != 0:
                out.update(failed_stage=stage, error_lines=error_lines(text))
                return out
        progress(stage="install")
        pkg = os.path.join(work, args["package"])
        if not os.path.isdir(pkg):
            out.update(
                failed_stage="install", error_lines=["the build left no " + args["package"] + "/ to install"]
            )
            return out
        # a fresh versioned copy each time (also for --force of the same build), then one rename
        parent, leaf = os.path.split(path)
        p["link_to"] = "." + leaf + "-" + p["tag"] + "-" + str(int(time.time() * 1000))
        p["version_dir"] = vdir = os.path.join(parent, p["link_to"])
        os.makedirs(parent, exist_ok=True)
        shutil.copytree(pkg, vdir + ".tmp", ignore=shutil.ignore_patterns("__pycache__"))
        os.replace(vdir + ".tmp", vdir)
        old_link = os.readlink(path) if os.path.islink(path) else None
        swap_link(path, p["link_to"])
        check = [
            sys.executable,
            "-c",
            "import importlib,os,sys; sys.path.insert(0, sys.argv[1]); "
            "m = importlib.import_module(sys.argv[2]); print(os.path.realpath(m.__file__))",
            p["target_dir"],
            p["module"],
        ]
        rc, so, se = sh(check, timeout=120)
        if rc != 0 or not so.strip().startswith(os.path.realpath(vdir) + os.sep):
            if old_link:
                swap_link(path, old_link)
            else:
                os.unlink(path)
            shutil.rmtree(vdir, ignore_errors=True)
            why = (se.strip().splitlines() or ["imported " + so.strip() + " instead"])[-1]
            out.update(
                failed_stage="install", error_lines=["import check failed, install rolled back: " + why]
            )
            return out
        if old_link:
            shutil.rmtree(os.path.join(parent, old_link), ignore_errors=True)
        if os.path.isdir(final):
            shutil.rmtree(final)
        os.replace(work, final)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        records[name] = {
            "name": name,
            "hash": args["hash"],
            "arch": args["arch"],
            "language": args["language"],
            "target": args["target"],
            **{k: p[k] for k in ("target_dir", "install_path", "version_dir", "link_to", "module", "python")},
            "build_dir": final,
            "installed_at": now,
            "previous": rec and {k: rec.get(k) for k in ("hash", "arch", "installed_at")},
        }
        write_records(p["state_dir"], records)
        out.update(status="built", installed_at=now)
        return out
    finally:
        if os.path.isdir(work):
            shutil.rmtree(work, ignore_errors=True)
        held.close()


def uninstall_check(args, state, records):
    rec = records.get(args["name"])
    if not rec:
        raise UserError("kernel " + args["name"] + " is not installed on this host by sglops (" + state + ")")
    path = rec["install_path"]
    if os.path.lexists(path) and not (os.path.islink(path) and os.readlink(path) == rec["link_to"]):
        raise UserError(path + " was changed since sglops installed it; refusing to remove it")
    return rec


def uninstall(args):
    hint = args.get("sglang_root")
    state = state_dir(hint)
    if args.get("dry_run"):
        return {"status": "would-uninstall", **uninstall_check(args, state, read_records(state))}
    if not os.path.isdir(state):
        # the one-line "not installed", without making the state dir
        uninstall_check(args, state, {})
    held = lock(state)
    try:
        records = read_records(state)
        rec = uninstall_check(args, state, records)
        path = rec["install_path"]
        if os.path.lexists(path):
            os.unlink(path)
        shutil.rmtree(rec["version_dir"], ignore_errors=True)
        parent = os.path.dirname(path)
        if os.path.isdir(parent) and not os.listdir(parent):
            os.rmdir(parent)
        shutil.rmtree(rec.get("build_dir") or "/nonexistent", ignore_errors=True)
        del records[args["name"]]
        write_records(state, records)
    finally:
        held.close()
    return {"status": "uninstalled", **rec}


def main(args):
    action = args.get("action", "build")
    if action == "build":
        return build(args)
    if action == "uninstall":
        return uninstall(args)
    if action == "list":
        state = state_dir(args.get("sglang_root"))
        return {
            "state_dir": state,
            "installed": sorted(read_records(state).values(), key=lambda r: r["name"]),
        }
    raise UserError("unknown kernel action " + repr(action))
