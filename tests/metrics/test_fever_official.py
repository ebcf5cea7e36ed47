"""Our FEVER score against the official scorer on the same inputs.

The official ``fever-scorer`` cannot be pip-installed (its setup.py fails on current setuptools: see
``coda_exp/metrics/fever.py``), so this test downloads its pinned sdist from PyPI (checked by SHA-256), imports
``src/fever/scorer.py`` from the extracted archive (nothing is copied into the project) and compares
``fever_score`` on random instances: strict score, label accuracy, evidence precision, recall and F1. Marked slow
(it needs the package index); skipped with the reason when the index cannot be reached.
"""

from __future__ import annotations

import hashlib
import importlib.util
import random
import sys
import tarfile
import types
import urllib.request

import pytest

from coda_exp.metrics.fever import NEI, fever_score

pytestmark = pytest.mark.slow

URL = ("https://files.pythonhosted.org/packages/61/d1/95f1133ded0d74a9d24fe5e15c43f2b3c31f018d0227fa34376f93cf0f08/"
       "fever-scorer-2.0.39.tar.gz")
SHA256 = "b87979f85c8ba2bf09d86db43f9805de110610288f45348a81657f0f4d3058a3"


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fever_scorer")
    try:
        data = urllib.request.urlopen(URL, timeout=60).read()
    except OSError as err:
        pytest.skip(f"the package index is not reachable ({err}): cannot fetch the official scorer")
    assert hashlib.sha256(data).hexdigest() == SHA256, "fever-scorer 2.0.39 sdist changed on the index"
    (folder / "sdist.tar.gz").write_bytes(data)
    with tarfile.open(folder / "sdist.tar.gz") as tar:
        member = tar.getmember("fever-scorer-2.0.39/src/fever/scorer.py")
        (folder / "scorer.py").write_bytes(tar.extractfile(member).read())
    sys.modules.setdefault("six", types.SimpleNamespace(string_types=(str,)))  # all the scorer uses of six
    spec = importlib.util.spec_from_file_location("official_fever_scorer", folder / "scorer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def random_instance(rng: random.Random) -> dict:
    pages = ["A", "B", "C", "D"]
    label = rng.choice(["SUPPORTS", "REFUTES", NEI])
    if label == NEI:
        evidence = [[[rng.randrange(99), None, None, None]]]
    else:
        evidence = [[[1, rng.randrange(99), rng.choice(pages), rng.randrange(4)] for _ in range(rng.randint(1, 3))]
                    for _ in range(rng.randint(1, 3))]
    predicted = [[rng.choice(pages), rng.randrange(4)] for _ in range(rng.randint(0, 8))]
    return {"label": label, "predicted_label": rng.choice(["SUPPORTS", "REFUTES", NEI]), "evidence": evidence,
            "predicted_evidence": predicted}


@pytest.mark.parametrize("seed", range(5))
def test_our_fever_score_equals_the_official_scorer(official, seed):
    rng = random.Random(seed)
    instances = [random_instance(rng) for _ in range(300)]
    ours = fever_score(instances, max_evidence=5)
    theirs = official.fever_score([dict(i) for i in instances], max_evidence=5)
    assert ours == pytest.approx(tuple(theirs), abs=1e-12)
