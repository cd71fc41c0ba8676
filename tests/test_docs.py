"""docs/design.md's layout and data-flow diagram name the package as it is."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "rope_lab"


def _block(text: str, heading: str) -> str:
    """The first fenced block after ``heading``."""
    after = text[text.index(heading) :]
    return after.split("```")[1]


def test_the_layout_names_every_module_and_nothing_else() -> None:
    layout = _block((REPO / "docs" / "design.md").read_text(), "## Layout")
    named = set(re.findall(r"\b(\w+\.py)\b", layout))
    folders = set(re.findall(r"\b(\w+)/", layout))
    modules = {p.name for p in PACKAGE.rglob("*.py")}
    packages = {p.parent.name for p in PACKAGE.rglob("__init__.py")}
    assert modules - named == set(), "modules missing from docs/design.md's layout"
    assert named - modules == set(), "docs/design.md's layout names modules that do not exist"
    assert packages - folders == set(), "packages missing from docs/design.md's layout"


def test_the_data_flow_names_modules_that_exist() -> None:
    flow = _block((REPO / "docs" / "design.md").read_text(), "## Data flow")
    dotted = set(re.findall(r"\brope_lab(?:\.\w+)+", flow))
    assert len(dotted) > 20
    for name in dotted:
        parts = name.split(".")
        # a module or package, possibly followed by one attribute (a function)
        candidates = [parts, parts[:-1]]
        assert any(
            (REPO / Path(*p)).with_suffix(".py").is_file() or (REPO / Path(*p)).is_dir()
            for p in candidates
            if len(p) > 1
        ), f"{name} (docs/design.md's data flow) is not a module of rope_lab"
