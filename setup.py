"""Packages and package data that pyproject.toml cannot say: the shipped defaults (playbooks/, patches/,
kernels/, templates/ at the checkout's root) travel in the wheel as sglops/defaults/ (sglops/core/paths.py
reads them there)."""

from setuptools import find_packages, setup

DEFAULTS = ("playbooks", "patches", "kernels", "templates")

setup(
    packages=find_packages(include=["sglops", "sglops.*"]) + [f"sglops.defaults.{d}" for d in DEFAULTS],
    package_dir={f"sglops.defaults.{d}": d for d in DEFAULTS},
    package_data={
        "sglops": ["host/*.py", "sandbox/bin/*"],
        **{f"sglops.defaults.{d}": ["**/*"] for d in DEFAULTS},
    },
    exclude_package_data={f"sglops.defaults.{d}": ["**/__pycache__/*", "**/*.pyc"] for d in DEFAULTS},
)
