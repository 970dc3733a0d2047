"""The docs against the code: every name README.md, docs/*.md and the lessons' prose put in a
code span exists (tests/support/doc_names.py says how each kind is checked), every shell block
is run by a test or marked as an example with why, and the package's docstrings name only
modules and commands that are there. A stale name fails here with its file and line."""

from __future__ import annotations

import pytest

from tests.support import doc_names

SOURCES = {source.name: source for source in doc_names.sources()}


def test_the_sources_are_the_pages_and_the_lessons() -> None:
    assert "README.md" in SOURCES and "docs/worker.md" in SOURCES and "docs/GLOSSARY.md" in SOURCES
    assert "notebooks/02_recoverable_claim.ipynb" in SOURCES and "notebooks/present.ipynb" in SOURCES


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_name_in_the_docs_is_in_the_code(name: str) -> None:
    found = doc_names.problems(SOURCES[name])
    assert not found, "names the code does not have:\n" + "\n".join(found)


@pytest.mark.parametrize("name", sorted(n for n in SOURCES if n.endswith(".md")))
def test_every_shell_block_is_run_by_a_test_or_says_why_not(name: str) -> None:
    found = doc_names.shell_blocks_unmarked(SOURCES[name])
    assert not found, "\n".join(found)


def test_the_package_docstrings_name_what_there_is() -> None:
    found = doc_names.docstring_problems()
    assert not found, "names the code does not have:\n" + "\n".join(found)


# -- the checker catches what it is for ------------------------------------------------------


def planted(page: str, line: str) -> list[str]:
    """The problems of ``page`` with ``line`` added at its end."""
    path = doc_names.ROOT / page
    return doc_names.problems(doc_names.page_source(path, path.read_text() + "\n" + line + "\n"))


def last_line(page: str) -> int:
    return len((doc_names.ROOT / page).read_text().splitlines()) + 2


def test_a_stale_attribute_fails_with_its_file_and_line() -> None:
    assert planted("docs/worker.md", "The handler reads `delivery.attempt`.") == [
        f"docs/worker.md:{last_line('docs/worker.md')}: `delivery.attempt`: Delivery has no attempt"
    ]
    assert planted("docs/worker.md", "The handler reads `delivery.token` and `Claim.attempts`.") == []


def test_a_path_that_is_not_there_fails_with_its_file_and_line() -> None:
    where = f"docs/library.md:{last_line('docs/library.md')}"
    assert planted("docs/library.md", "See `lua/claim_all.lua`.") == [
        f"{where}: `lua/claim_all.lua`: no such file or folder"
    ]
    assert planted("docs/library.md", "See `lua/claim.lua` and `includes/fence.lua`.") == []


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("Run `python -m echoq consume`.", "echoq has no subcommand 'consume'"),
        ("Run `python -m echoq.teaching chaos --killers 3`.", "echoq.teaching chaos has no option --killers"),
        ("Run `make serve`.", "the Makefile has no target 'serve'"),
        ("Run `python bench/throughput.py --quickly`.", "bench/throughput.py has no option --quickly"),
        ("Read `echoq.scripts.KEY_ORDERS`.", "echoq.scripts has no KEY_ORDERS"),
        ("Its row counts `released`.", "no script writes or reads the row field 'released'"),
        ("Counted in stats `reclaimed`.", "no script writes or reads the stats field 'reclaimed'"),
        ("Counted in `stats.reclaimed`.", "no script writes or reads the stats field 'reclaimed'"),
        ("Read `WorkReport.processd`.", "WorkReport has no processd"),
        ("At most `WAKE_CAP` = 65 wakes.", "WAKE_CAP is 64"),
        ("A job still running `CONFIRM_S`, 20 ms, after its start.", "CONFIRM_S is 0.01 s"),
        ("A page polls every 200 ms (`POLL_MS`).", "POLL_MS is 100 ms"),
        ("Pass `Durability(replica=1)`.", "Durability() takes no argument 'replica'"),
        ("Call `q.claim(lease=5_000)`.", "q.claim() takes no argument 'lease'"),
        ("Call `work(bursts=True)`.", "work() takes no argument 'bursts'"),
        ("Hand them back with `release_all`.", "the code has no name 'release_all'"),
        ("It returns a `ChaosResult`.", "the code has no name 'ChaosResult'"),
    ],
)
def test_each_kind_of_stale_name_fails(line: str, why: str) -> None:
    found = planted("docs/limits.md", line)
    assert len(found) == 1 and found[0].endswith(why), found


def test_the_same_kinds_that_exist_pass() -> None:
    for line in [
        "Run `python -m echoq check` or `python -m echoq.teaching chaos --workers 4 --naive`.",
        "Run `PORT=9000 make lab`; read `echoq.scripts.KEY_ORDER`, `Queue.claim`, `report.released`.",
        "Run `.venv/bin/python bench/throughput.py --quick --json` or `python bench/startup.py --runs 50`.",
        "The row's `token`, its `attempts`; stats `corrupt`.",
        "At most `WAKE_CAP` = 64 wakes; `CONFIRM_S`, 10 ms; every 100 ms (`POLL_MS`); `NUDGE_S` (5 ms).",
        "`Durability(replicas=1, fsync=True)`, `q.claim(lease_ms=5_000)`, `work(burst=True)`, `max(a, key=len)`.",
    ]:
        assert planted("docs/limits.md", line) == [], line


def test_a_python_block_s_calls_are_checked_too() -> None:
    block = "```python\nworker = Worker(q, handler, concurency=2)\n```"
    (found,) = planted("docs/worker.md", block)
    assert found.endswith("Worker() takes no argument 'concurency'")


def test_a_shell_block_needs_a_marker_and_a_tested_one_a_real_test() -> None:
    def unmarked(text: str) -> list[str]:
        return doc_names.shell_blocks_unmarked(doc_names.page_source(doc_names.ROOT / "docs/x.md", text))

    block = "```bash\nmake lab\n```\n"
    assert len(unmarked(block)) == 1
    assert unmarked("<!-- example: starts a server -->\n" + block) == []
    assert unmarked("<!-- tested: tests/test_docs_names.py::test_the_same_kinds_that_exist_pass -->\n" + block) == []
    assert len(unmarked("<!-- tested: tests/test_docs_names.py::test_nothing -->\n" + block)) == 1
    assert unmarked("<!-- tested: tests/test_docs_names.py -->\n" + block) == []
    assert len(unmarked("<!-- tested: tests/test_nothing.py -->\n" + block)) == 1
    # A tested block's commands must be ones its tests run: words they hold as quoted strings.
    served = "```bash\npython -m echoq server start\npython -m echoq server url --verbose\n```\n"
    kill_9 = (
        "tests/test_user_server.py::test_jobs_a_producer_left_wait_for_a_later_worker_even_across_a_kill_9_of_the_server"
    )
    no_tcp = "tests/test_user_server.py::test_only_its_user_can_open_it_and_it_has_no_tcp_port"
    (why,) = unmarked(f"<!-- tested: {kill_9} -->\n" + served)
    assert why.endswith("which never runs url --verbose of `python -m echoq server url --verbose`"), why
    (why,) = unmarked(f"<!-- tested: {kill_9} {no_tcp} -->\n" + served)
    assert why.endswith("which never runs --verbose of `python -m echoq server url --verbose`"), why
    down = "python -m echoq.teaching workshop down --keep-server"
    assert doc_names.words_not_run(down, "admin.down(folder, keep_server=True)") == ["workshop", "down"]
