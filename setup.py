"""Packaging that pyproject.toml cannot say, fixed by the project layout: the top-level ``configs/`` folder ships
inside the wheel as the package data ``coda_exp/configs/**.yaml``, and ``tests/fixtures/`` (the tiny benchmark files
``scale=fixture`` reads, written by ``scripts/make_fixtures.py``: one copy in git, copied into the wheel at build) as
``coda_exp/fixtures/**``, where ``coda_exp.environment`` finds both when the package is installed. Everything else
is in pyproject.toml."""

from setuptools import find_namespace_packages, find_packages, setup


def data_packages(package: str, folder: str, exclude: tuple[str, ...] = ()) -> list[str]:
    """``package`` and one package per sub-folder of ``folder`` (setuptools ships data files per package)."""
    return [package, *(f"{package}.{p}" for p in find_namespace_packages(folder, exclude=exclude))]


# configs/local/ is each machine's git-ignored settings: never shipped
CONFIGS = data_packages("coda_exp.configs", "configs", exclude=("local", "local.*"))
FIXTURES = data_packages("coda_exp.fixtures", "tests/fixtures", exclude=("*__pycache__*",))

setup(
    packages=[*find_packages(include=["coda_exp", "coda_exp.*"]), *CONFIGS, *FIXTURES],
    package_dir={"coda_exp.configs": "configs", "coda_exp.fixtures": "tests/fixtures"},
    package_data={**{p: ["*.yaml"] for p in CONFIGS}, **{p: ["*"] for p in FIXTURES}},
)
