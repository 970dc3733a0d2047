"""The suite's tiers hold: the library's tests load no kit module, and a unit test that
reaches for a server is stopped (docs/TESTING.md)."""

from __future__ import annotations

import ast
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import conftest

TESTS = Path(__file__).resolve().parent

# The tests of the library (echoq outside echoq.teaching). They must pass with the library
# alone, so neither they nor the test support they import loads the teaching kit.
LIBRARY_TESTS = {
    "test_batch", "test_bounds", "test_clock", "test_corrupt", "test_effects", "test_payloads",
    "test_permissions", "test_queue", "test_secrets", "test_server", "test_stateful", "test_validation",
    "test_worker_command", "test_worker_stop",
}  # fmt: skip
# Library tests that still borrow from the kit, each with what it borrows: this list may
# only shrink (a module here that no longer loads the kit fails the test below).
BORROWING = {"test_worker": "the kit's CrashPlan as the Worker's crash hooks"}


def _imports(tree: ast.AST, *, top_level_only: bool) -> set[str]:
    """Modules a module imports: all of them, or only those run when it is imported
    (neither inside a function nor under TYPE_CHECKING)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if top_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if top_level_only and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.add(child.module)
                found.update(f"{child.module}.{alias.name}" for alias in child.names)
            visit(child)

    visit(tree)
    return found


def _loads(test_module: str) -> set[str]:
    """Everything a test module imports anywhere, plus what the test support modules it
    (and conftest.py) imports load at import time, followed through tests.*."""
    seen: set[str] = set()
    todo = [(TESTS / f"{test_module}.py", False), (TESTS / "conftest.py", True)]
    while todo:
        path, top_only = todo.pop()
        for name in _imports(ast.parse(path.read_text()), top_level_only=top_only):
            if name in seen:
                continue
            seen.add(name)
            parts = name.split(".")
            if parts[0] == "tests" and len(parts) > 1:
                file = TESTS.joinpath(*parts[1:]).with_suffix(".py")
                if file.exists():
                    todo.append((file, parts[1] != "conftest" and not parts[1].startswith("test_")))
    return seen


def _kit(modules: set[str]) -> set[str]:
    return {m for m in modules if m == "echoq.teaching" or m.startswith("echoq.teaching.")}


@pytest.mark.parametrize("module", sorted(LIBRARY_TESTS))
def test_a_library_test_loads_no_kit_module(module: str) -> None:
    assert not _kit(_loads(module)), f"{module} loads the teaching kit: {sorted(_kit(_loads(module)))}"


@pytest.mark.parametrize("module", sorted(BORROWING))
def test_a_library_test_still_listed_as_borrowing_from_the_kit_does(module: str) -> None:
    assert _kit(_loads(module)), f"{module} no longer loads the kit: take it off BORROWING, add it to LIBRARY_TESTS"


def test_the_analysis_sees_an_import_through_test_support() -> None:
    # The lab tour loads the kit at import time; a module importing it loads the kit.
    assert _kit(_loads("test_lab_pictures"))
    assert "tests.support.lab_tour" in _loads("test_lab_pictures")


def test_every_test_module_is_either_library_or_not_and_exists() -> None:
    named = LIBRARY_TESTS | set(BORROWING)
    assert named <= {p.stem for p in TESTS.glob("test_*.py")}


def test_a_unit_test_cannot_connect_to_a_server() -> None:
    touched: list[str] = []
    with conftest._unit_tier(touched), pytest.raises(conftest._Touched):
        socket.create_connection(("127.0.0.1", 6379), timeout=1)
    assert touched and "127.0.0.1" in touched[0]


def test_a_unit_test_cannot_start_a_process() -> None:
    touched: list[str] = []
    with conftest._unit_tier(touched), pytest.raises(conftest._Touched):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert touched and "started a process" in touched[0]


def test_the_unit_tier_gives_sockets_and_processes_back() -> None:
    before = socket.socket.connect, subprocess.Popen.__init__
    with conftest._unit_tier([]):
        assert socket.socket.connect is not before[0]
    assert (socket.socket.connect, subprocess.Popen.__init__) == before


def test_every_file_the_order_tables_name_exists() -> None:
    root = TESTS.parent
    files = {p.name for p in TESTS.glob("test_*.py")} | {p.name for p in (root / "notebooks").glob("*.ipynb")}
    named = set(conftest.SPLIT) | conftest.BROWSER_MODULES
    assert named <= files, sorted(named - files)
    assert all((root / path).is_file() for path in conftest.WITH_BROWSER_JOB), conftest.WITH_BROWSER_JOB
    for unit in conftest.recorded_seconds():  # a file, a SPLIT file's function or case, or the cluster
        path, _, test = unit.partition("::")
        assert unit == conftest.CLUSTER_UNIT or (root / path).is_file(), unit
        if test:
            assert path.rpartition("/")[2] in conftest.SPLIT, unit
            assert f"def {test.split('[', 1)[0]}(" in (root / path).read_text(), unit


def test_a_notebook_is_one_unit_and_a_split_file_goes_by_function_or_case() -> None:
    unit = conftest.unit_of
    lesson = "notebooks/07_beyond_one_server.ipynb"
    assert unit(f"{lesson}::Cell 3") == unit(f"{lesson}::Cell 9") == unit(f"{lesson}::every cell run again")
    assert unit("tests/test_queue.py::test_a[valkey]") == unit("tests/test_queue.py::test_b[redis7]")
    assert unit("tests/test_lab.py::test_a[ClaimLab]") == unit("tests/test_lab.py::test_a[FleetLab]")
    assert unit("tests/test_lab.py::test_a[ClaimLab]") != unit("tests/test_lab.py::test_b")
    assert unit("tests/test_lab_truth.py::test_a[ClaimLab]") != unit("tests/test_lab_truth.py::test_a[FleetLab]")


def test_the_order_is_longest_first_with_the_judges_after_the_browser_tests() -> None:
    class Item:  # what _longest_first reads of a collected test
        def __init__(self, nodeid: str) -> None:
            self.nodeid, self.path = nodeid, Path(nodeid.partition("::")[0])

    lab = "tests/test_lab.py::test_the_fleet_never_shows_a_loss_that_did_not_happen"
    judge = "tests/test_exercises.py::test_a_named_wrong_answer_is_rejected_with_its_line[claim-x]"
    short = [f"tests/test_lab.py::test_short_{n}" for n in range(70)]  # the file's other functions
    ids = [judge, "tests/test_tiers.py::test_x", *short, lab, "tests/test_browser.py::test_y"]
    order = [i.nodeid for i in conftest._longest_first([Item(n) for n in ids])]  # type: ignore[arg-type]
    assert order[0] == "tests/test_browser.py::test_y" and order[-1] == judge, order
    # A unit goes by its recorded time (tests/durations.json); one never recorded counts 0.05 s a test.
    assert conftest.recorded_seconds()[lab] > 1 and order[1] == lab, order
    assert order.index("tests/test_tiers.py::test_x") > order.index(lab), order
