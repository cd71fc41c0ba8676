import ast
from pathlib import Path

import pytest

from tests.mutation.known_defects import DEFECTS, REPO


@pytest.mark.parametrize("defect", DEFECTS, ids=lambda d: d.name)
def test_every_defect_still_applies_once_and_names_tests_that_exist(defect):
    # a defect whose text the code no longer holds stops the whole mutation script
    source = (REPO / defect.path).read_text()
    assert source.count(defect.old) == 1, f"{defect.path}: {defect.old!r}"
    assert defect.old != defect.new
    for test in defect.tests:
        assert (REPO / Path(test.split("::")[0])).is_file(), test


def test_defect_names_are_unique():
    names = [d.name for d in DEFECTS]
    assert len(names) == len(set(names))


def _is_slow_mark(node: ast.expr) -> bool:
    """Whether a decorator or `pytestmark` entry is `pytest.mark.slow` (called or not)."""
    target = node.func if isinstance(node, ast.Call) else node
    return ast.unparse(target) == "pytest.mark.slow"


def _slow_marks(value: ast.expr) -> bool:
    """Whether a `pytestmark` value (one mark or a list of them) holds `pytest.mark.slow`."""
    marks = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
    return any(_is_slow_mark(m) for m in marks)


@pytest.mark.parametrize("defect", DEFECTS, ids=lambda d: d.name)
def test_named_test_functions_exist_in_the_default_suite(defect):
    # a node id naming a renamed or slow-marked test collects nothing by default: not a kill
    for test in defect.tests:
        path, _, node = test.partition("::")
        tree = ast.parse((REPO / path).read_text())
        module_slow = any(
            isinstance(stmt, ast.Assign)
            and any(ast.unparse(t) == "pytestmark" for t in stmt.targets)
            and _slow_marks(stmt.value)
            for stmt in tree.body
        )
        assert not module_slow, f"{path} is marked slow as a whole"
        if not node:
            continue
        name = node.split("[")[0]
        functions = {
            f.name: f for f in tree.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        assert name in functions, test
        assert not any(_is_slow_mark(d) for d in functions[name].decorator_list), test
