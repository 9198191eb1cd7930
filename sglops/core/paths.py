"""Where sglops finds its files: the inventory, profiles, plays, patches, kernels and templates, and where it
keeps its records and caches, in a checkout and in an installed copy (`pip install`, `pipx`, `uv tool`) alike.

A file sglops reads (a profile, a play, a patch, ...) is looked up under the same relative path
(`playbooks/hosts.yaml`, `playbooks/profiles/NAME.yaml`, `patches/NAME/`, `kernels/NAME/`, `templates/`) in
these layers, the first that has it wins:

1. the folder's own environment variable, when set, alone (`SGLOPS_INVENTORY`, `SGLOPS_PROFILES`,
   `SGLOPS_PATCHES`, `SGLOPS_KERNELS`);
2. the current folder (`./playbooks/hosts.yaml`, ...);
3. the user's config folder: `$SGLOPS_HOME`, else `$XDG_CONFIG_HOME/sglops`, else `~/.config/sglops`;
4. the shipped defaults: the checkout's root when sglops runs from one, else the copy installed with the
   package (`sglops/defaults/`, package data).

Records (`artifacts/`) and caches (the sandbox) stay in the checkout when sglops runs from one; an installed
copy keeps them in `$SGLOPS_HOME` (else `$XDG_DATA_HOME/sglops`, `~/.local/share/sglops`) and
`~/.cache/sglops`.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# a checkout: its root holds the project file and the shipped folders (an installed package's parents do not)
IN_CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "playbooks" / "probes.yaml").is_file()
SHIPPED = REPO_ROOT if IN_CHECKOUT else Path(__file__).resolve().parents[1] / "defaults"


def config_home() -> Path:
    """The user's own folder: $SGLOPS_HOME, else the XDG config folder."""
    if os.environ.get("SGLOPS_HOME"):
        return Path(os.environ["SGLOPS_HOME"]).expanduser()
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config").expanduser() / "sglops"


def layers() -> list[Path]:
    """The folders searched, first wins: the current folder, the config folder, the shipped defaults."""
    out: list[Path] = []
    for p in (Path.cwd(), config_home()):
        if p.resolve() not in [q.resolve() for q in (*out, SHIPPED)]:
            out.append(p)
    return [*out, SHIPPED]


def folders(rel: str, env: str | None = None) -> list[Path]:
    """Every folder that may hold files of `rel` (e.g. "playbooks/profiles"), first wins: $env alone when set,
    else the layers' `rel` that exist, the shipped one always last."""
    if env and os.environ.get(env):
        return [Path(os.environ[env]).expanduser()]
    found = [p / rel for p in layers()[:-1] if (p / rel).is_dir()]
    return [*found, SHIPPED / rel]


def find(rel: str, name: str, env: str | None = None) -> Path:
    """`rel/name` from the first folder that has it; else the last candidate (an error names that path)."""
    candidates = [f / name for f in folders(rel, env)]
    return next((c for c in candidates if c.exists()), candidates[-1])


def listing(rel: str, pattern: str, env: str | None = None) -> list[Path]:
    """Every `rel/pattern` over the folders, one per name (`NAME.yaml`, or `NAME/` of `*/patch.yaml`: the
    first folder's), sorted by name."""
    seen: dict[str, Path] = {}
    for folder in folders(rel, env):
        for p in sorted(folder.glob(pattern)):
            seen.setdefault(p.relative_to(folder).parts[0], p)
    return [seen[k] for k in sorted(seen)]


def shipped(rel: str) -> Path:
    """A file that only sglops itself provides (probe specs, rules, templates)."""
    return SHIPPED / rel


def writable(rel: str, env: str | None = None) -> Path:
    """Where sglops writes a new file of `rel` (a captured
    patch): $env, the checkout, else the config folder."""
    if env and os.environ.get(env):
        return Path(os.environ[env]).expanduser()
    return (REPO_ROOT if IN_CHECKOUT else config_home()) / rel


def records() -> Path:
    """Where runs are recorded: $SGLOPS_ARTIFACTS, the checkout's artifacts/, else the user's data folder."""
    if os.environ.get("SGLOPS_ARTIFACTS"):
        return Path(os.environ["SGLOPS_ARTIFACTS"])
    if IN_CHECKOUT:
        return REPO_ROOT / "artifacts"
    if os.environ.get("SGLOPS_HOME"):
        return config_home() / "artifacts"
    return (
        Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share").expanduser()
        / "sglops"
        / "artifacts"
    )


def cache(rel: str) -> Path:
    """A cache folder: the checkout's .cache/, else $SGLOPS_CACHE or ~/.cache/sglops."""
    if IN_CHECKOUT:
        return REPO_ROOT / ".cache" / rel
    return Path(os.environ.get("SGLOPS_CACHE") or Path.home() / ".cache" / "sglops") / rel
