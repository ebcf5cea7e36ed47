"""Packaging that pyproject.toml cannot say: the top-level ``configs/`` folder (fixed by the project layout)
ships inside the wheel as the package data ``coda_exp/configs/**.yaml``, where ``coda_exp.cli`` finds it when the
package is installed. Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, find_packages, setup

# configs/local/ is each machine's git-ignored settings: never shipped
CONFIG_PACKAGES = ["coda_exp.configs", *(f"coda_exp.configs.{p}" for p in find_namespace_packages(
    "configs", exclude=["local", "local.*"]))]

setup(
    packages=[*find_packages(include=["coda_exp", "coda_exp.*"]), *CONFIG_PACKAGES],
    package_dir={"coda_exp.configs": "configs"},
    package_data={p: ["*.yaml"] for p in CONFIG_PACKAGES},
)
