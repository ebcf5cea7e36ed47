#!/usr/bin/env python
"""Before a sweep launches: can each of its tasks find its data? One message for all of them, instead of every job
failing on its own (``make reproduce-table-N`` runs this first).

    python scripts/check_sweep_data.py experiment=table_2 [scale=paper] [other train.py -m overrides, seed=1,2 too]

For each task the sweep runs (``hydra.sweeper.params.task`` or ``task=a,b``, else the composed ``task``; each swept
value is composed once, with the other keys at their first value), the check ``train.py -m`` itself makes before its
first job (:mod:`coda_exp.sweep_data`). Exit 0 when every task can start, 2 with the list of what each one lacks
otherwise, or with one line when the overrides do not compose (``scale=bogus``: the scales there are).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from coda_exp.cli import sweep_variants  # the checkout's package, first on the path
from coda_exp.sweep_data import data_refusal


def compose(overrides: list[str]):
    """The ``train`` config of ``overrides`` (no sweep in them), with its ``hydra`` section."""
    from hydra import compose as hydra_compose

    return hydra_compose("train", return_hydra_config=True, overrides=list(overrides))


def variants(parser, overrides: list[str], params) -> list[list[str]]:
    """The override lists to compose for a sweep of ``overrides`` (its own swept values, ``seed=1,2``) over an
    experiment's ``hydra.sweeper.params`` (``params``): the sweep's first job, then for each swept key each of its
    values with the other keys at their first (every composition is one of the sweep's jobs, every swept value is in
    one). A key on the command line replaces the experiment's sweep of it, as Hydra's sweeper does."""
    parsed = parser.parse_overrides([f"{k}={v}" for k, v in (params or {}).items()] + list(overrides))
    keys: dict[str, list[str]] = {}  # key -> its overrides, one per value
    for o in parsed:
        name = o.get_key_element()
        keys.pop(name.lstrip("~+"), None)  # a later override of a key replaces the earlier (the config's sweep)
        keys[name.lstrip("~+")] = ([f"{name}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
                                   else [o.input_line])
    return sweep_variants(list(keys.values()))


def one_line(message: str) -> str:
    """Hydra's "Could not find 'scale/bogus'" and its list of options as one line naming the override and what
    it takes; any other message as it is."""
    missing = re.search(r"Could not find '([^']+)/([^'/]+)'", message)
    options = re.search(r"Available options in '[^']+':\n((?:\t.*(?:\n|$))+)", message)
    if not missing or not options:
        return message
    group, value = missing.groups()
    choices = ", ".join(line.strip() for line in options.group(1).splitlines() if line.strip())
    return f"{group}={value}: no such {group} (configs/{group}/{value}.yaml); expected one of: {choices}"


def main(argv: list[str] | None = None) -> int:
    import yaml
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import ConfigCompositionException, OverrideParseException

    from coda_exp import resolvers  # noqa: F401 (registers ${dir_if_exists:...})
    from coda_exp.config_checks import composition_error, yaml_error
    from coda_exp.environment import config_dir

    overrides = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("CODA_EXP_ROOT", str(ROOT))
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(config_dir())):
            parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
            first = variants(parser, overrides, None)[0]  # the sweep's first job: its experiment's own sweep
            params = compose(first).hydra.sweeper.get("params")
            configs = [compose(job) for job in variants(parser, overrides, params)]
            refusal = data_refusal(configs)
    except (ConfigCompositionException, OverrideParseException) as err:
        print(f"error: {one_line(str(composition_error(err)))}", file=sys.stderr)
        return 2
    except yaml.YAMLError as err:  # a config file PyYAML cannot read
        print(f"error: {yaml_error(err)}", file=sys.stderr)
        return 2
    finally:
        GlobalHydra.instance().clear()
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
