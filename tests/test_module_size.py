"""Modules with one job each: no module of rope_lab grows past 450 lines."""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rope_lab"
LIMIT = 450


def test_no_module_is_over_the_limit() -> None:
    sizes = {p.relative_to(PACKAGE): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {str(p): n for p, n in sizes.items() if n > LIMIT} == {}
    assert len(sizes) > 150
