"""scripts/make_fixtures.py (``make fixtures``), the one fixture writer: it rewrites every committed fixture under
tests/fixtures/ byte for byte (deterministic writers, and fixtures that are what the script writes)."""

from __future__ import annotations

from tests import ROOT

FIXTURES = ROOT / "tests" / "fixtures"


def test_make_fixtures_rewrites_every_committed_fixture(load_script, tmp_path):
    assert load_script("make_fixtures").main(["--out", str(tmp_path)]) == 0
    want = sorted(p.relative_to(FIXTURES) for p in FIXTURES.rglob("*") if p.is_file())
    got = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert got == want
    changed = [str(p) for p in want if (tmp_path / p).read_bytes() != (FIXTURES / p).read_bytes()]
    assert changed == []
