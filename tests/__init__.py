"""The test suite; its folders mirror the package. Paths every test may need (fixtures are in conftest.py)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
