"""The tables that describe code are generated from it when the site is built
(tools/generated_docs.py, called by tools/site_hooks.py): each is checked here against its
source, and each can be seen to follow it."""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys
from pathlib import Path

import pytest

import echoq
import echoq.keyspace
import echoq.limits
from tests.support import doc_names

gen = doc_names.generated_docs()
ROOT = doc_names.ROOT
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_marked_region_names_a_table_that_is_made() -> None:
    names = {name for page in PAGES for name in gen.regions(page.read_text())}
    assert {"limits", "keyspace", "scripts", "script-errors", "commands", "mutation-score"} <= names
    for page in PAGES:
        filled = gen.fill(page.read_text())  # an unknown name raises
        assert filled.count("<!-- generated:") == filled.count("<!-- /generated -->")
    with pytest.raises(KeyError, match="no table is generated under the name 'limit'"):
        gen.fill("<!-- generated: limit -->\nx\n<!-- /generated -->")


def test_the_limits_table_is_the_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    text = gen.limits()
    for name, (low, high) in echoq.limits.BOUNDS.items():
        assert re.search(rf"\| `{name}` \| {low:,} \.\. {high:,} \|", text), name
    assert "| `max_stalled` | 1 .. 1,000 | 2 |" in text  # the Worker's default
    monkeypatch.setitem(echoq.limits.BOUNDS, "lease_ms", (1, 3_600_000))
    assert "| `lease_ms` | 1 .. 3,600,000 |" in gen.limits()


def test_the_limits_table_fails_on_a_bound_with_no_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every bound says why it is that size: a bound the module's table leaves out, or gives
    an empty "why", fails the page's generator instead of showing an empty cell."""
    rows = [row for row in gen.rst_table(echoq.limits.__doc__ or "")[1:]]
    assert {row[0].strip("`") for row in rows if row[2].strip()} == set(echoq.limits.BOUNDS)
    monkeypatch.setitem(echoq.limits.BOUNDS, "keep_made_up", (0, 1))
    with pytest.raises(ValueError, match=r"gives no reason \(why this size\) for \['keep_made_up'\]"):
        gen.limits()
    monkeypatch.delitem(echoq.limits.BOUNDS, "keep_made_up")
    emptied = (echoq.limits.__doc__ or "").replace("a week: how long an id a producer gave is a duplicate", "")
    monkeypatch.setattr(echoq.limits, "__doc__", emptied)
    with pytest.raises(ValueError, match=r"for \['keep_given_ms'\]"):
        gen.limits()


def test_the_keyspace_table_is_every_key_keyspace_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    text = gen.keyspace()
    ks = echoq.Keyspace("q")
    for key in (ks.pending, ks.active, ks.wake, ks.stalled_lock, "emq:{q}:job:<id>", "emq:{q}:halt:<run>"):
        assert f"| `{key}` |" in text, key
    doc = echoq.keyspace.__doc__ or ""
    without_wake = "\n".join(line for line in doc.splitlines() if "emq:{q}:wake" not in line)
    monkeypatch.setattr(echoq.keyspace, "__doc__", without_wake)
    with pytest.raises(ValueError, match=r"leaves out \['emq:\{q\}:wake'\]"):
        gen.keyspace()


def test_the_scripts_table_is_every_script_and_its_header() -> None:
    text = gen.scripts()
    for script in sorted((ROOT / "lua").glob("*.lua")):
        assert f"[`{script.name}`](../lua/{script.name})" in text
    claim = gen.lua_header(ROOT / "lua" / "claim.lua")
    assert claim["what"].startswith("The recoverable claim.")
    assert claim["contract"].startswith("KEYS[1]") and "ARGV[1]  lease               milliseconds" in claim["contract"]
    assert "Errors" in claim["contract"] and "--- @include" not in claim["contract"]


def test_the_script_errors_table_is_the_one_table() -> None:
    text = gen.script_errors()
    for code, (cls, _means) in echoq.SCRIPT_ERRORS.items():
        assert f"| `{code}` | `{cls.__name__}` |" in text


def test_the_commands_page_is_each_parsers_help() -> None:
    text = gen.commands()
    commands = gen.command_tree()
    assert text.count("usage: ") == len(commands) + len(gen.benches())
    assert {("echoq", "server"), ("echoq", "dead", "requeue"), ("echoq.teaching", "workshop", "restart")} <= {
        tuple(w) for w, _ in commands
    }
    assert "### `python bench/throughput.py`" in text and "--no-bullmq" in text
    assert "--kill-rate" in text and "{worker,chaos,workshop}" in text and "{check,server," in text


def test_stored_runs_are_shown_with_their_date_and_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(gen, "DATA", tmp_path)
    monkeypatch.setattr(gen, "MUTANTS_RECORD", tmp_path / "mutants.json")
    assert "no recorded run yet" in gen.mutation_score() and "tools/mutants.py --record" in gen.mutation_score()
    one = {"key": "claim", "made": 40, "killed": 36, "equivalent": [["a", "why"]] * 4, "gaps": []}
    one["operators"] = {"x": 40}
    record = {"date": "2026-12-05 09:00 UTC", "commit": "abc1234", "exercises": {"claim": one}}
    (tmp_path / "mutants.json").write_text(json.dumps(record))
    shown = gen.mutation_score()
    assert "| claim | 40 | 36 | 4 | 0 | x 40 |" in shown and "36 of 36 non-equivalent mutants killed" in shown
    assert shown.endswith("This run was measured 2026-12-05 09:00 UTC on commit `abc1234`.")
    (tmp_path / "bench").mkdir()
    summary = {"median_s": 0.07, "p95_s": 0.14, "max_s": 0.14, "min_s": 0.05}
    machine = {"cores": 2, "python": "CPython 3.11.7", "redis_py": "8.1.0", "load_average_1m": 0.9}
    report = {"machine": machine, "runs": 20, "target_s": 0.3}
    report |= {"launch_to_first_ping": summary, "start_server_call": summary, "samples_s": []}
    stored = {"date": "2026-12-05 08:56 UTC", "commit": "abc1234", "command": "python bench/startup.py --json"}
    stored["report"] = report
    (tmp_path / "bench" / "startup.json").write_text(json.dumps(stored))
    shown = gen.fill("<!-- generated: bench-startup -->\nx\n<!-- /generated -->")
    assert "| launch to first PING |    0.070 | 0.140 | 0.140 | yes" in shown  # bench/startup.py's render()
    assert "machine: 2 cores, CPython 3.11.7" in shown and "Measured 2026-12-05 08:56 UTC on commit `abc1234`" in shown


def test_design_prose_is_the_modules_docstring_with_its_constants_valued() -> None:
    import echoq.worker

    text = gen.docstring("echoq.worker")
    assert "**One I/O owner.**" in text and ":class:" not in text and not re.search(r"(?<!`)``(?!`)", text)
    assert f"`QUICK_JOB_S` ({echoq.worker.QUICK_JOB_S * 1e6:g} µs)" in text
    assert f"`PREFETCH_PER_SLOT` ({echoq.worker.PREFETCH_PER_SLOT})" in text


def test_the_pipelining_threshold_the_docstring_gives_is_the_code_s() -> None:
    """The smallest concurrency that may hold LANES calls of SPLIT_MIN jobs, by default."""
    import echoq.worker
    from echoq.worker.pacing import PrefetchPolicy

    need = echoq.worker.LANES * echoq.worker.SPLIT_MIN
    smallest = next(c for c in range(1, 100) if PrefetchPolicy(c, None, extends=True).most() >= need)
    assert f"concurrency {smallest} or more with the default prefetch" in (echoq.worker.__doc__ or "")


def test_a_dataclass_s_fields_are_listed_from_the_class() -> None:
    text = gen.fields("echoq.WorkReport")
    for field in ("claimed", "completed", "released", "lease_lost", "round_trips"):
        assert f"`{field}`" in text
    assert "`processed`" not in text  # a property, not a field


def test_a_pipe_escaped_in_a_table_s_code_shows_as_a_pipe_on_the_site() -> None:
    from tests.support.site import site_hooks

    row = "| `\\b(?:a\\|b)\\.c\\b` | say `x` |"
    assert site_hooks()._pipes_in_table_code(row) == "| <code>&#92;b(?:a&#124;b)&#92;.c&#92;b</code> | say `x` |"
    assert site_hooks()._pipes_in_table_code("not a row: `a\\|b`") == "not a row: `a\\|b`"


def test_every_key_a_script_header_names_is_one_keyspace_builds() -> None:
    """The two sources the keyspace is read from agree: the Lua headers name no key Keyspace
    does not build (a row key's id and a run's token are placeholders)."""
    ks = echoq.Keyspace("q")
    built = {getattr(ks, n) for n, v in vars(echoq.Keyspace).items() if isinstance(v, property)} - {ks.prefix}
    built |= {ks.prefix + "job:<id>", ks.prefix + "halt:<run>"}
    for script in sorted((ROOT / "lua").glob("*.lua")):
        for key in re.findall(r"emq:\{q\}:[\w:<>]+", gen.lua_header(script)["contract"]):
            placeholder = "<id>" if ":job:" in key else "<run>"
            assert re.sub(r"<[^>]+>$", placeholder, key) in built, (script.name, key)


def test_each_bench_s_help_says_its_first_paragraph_whole() -> None:
    """A description cut at the docstring's first line ends mid-sentence on the commands page."""
    for path in gen.benches():
        module = gen.bench_module(path.stem)
        code, text = gen.module_help(module, f"bench/{path.name}", [])
        first = " ".join((module.__doc__ or "").strip().split("\n\n")[0].split())
        assert code == 0 and first in " ".join(text.split()), path.name
        assert first[-1] in ".?)", f"{path.name}: its first paragraph is not a sentence: {first!r}"


def test_a_constant_said_in_a_sentence_is_the_code_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """One-line regions hold their value in the page itself: each must be what the code says."""
    from echoq.teaching.lab.figure import BoardFigure

    held = [(page.name, name, shown) for page in PAGES for name, shown in gen.inline_values(page.read_text())]
    assert ("lab.md", "value-echoq.teaching.lab.figure.BoardFigure.steps", str(BoardFigure.steps)) in held
    for page, name, shown in held:
        assert gen.generator(name)() == shown, f"docs/{page}: {name} says {shown}, the code {gen.generator(name)()}"
    monkeypatch.setattr(BoardFigure, "steps", 24)
    line = "over <!-- generated: value-echoq.teaching.lab.figure.BoardFigure.steps -->18<!-- /generated --> frames"
    assert gen.fill(line) == line.replace("-->18<", "-->24<") and gen.regions(line) == [line.split()[3]]
    assert gen.value("echoq.teaching.lab.figure.BoardFigure.transition_s") == "720 ms"


def _runs(text: str, words: int = 12) -> set[tuple[str, ...]]:
    """Every run of ``words`` words of a text, code marks dropped (a page's `x` is a docstring's ``x``)."""
    flat = re.sub(r":\w+:`~?\.?([^`]+)`", r"\1", text).replace("`", "").replace("*", "").lower().split()
    return {tuple(flat[n : n + words]) for n in range(len(flat) - words + 1)}


def test_design_prose_shown_from_a_docstring_is_not_typed_again_on_any_page() -> None:
    """Design prose lives once: a page that shows a module's docstring (docstring-<module>)
    repeats none of its sentences outside that region, and neither does any other page."""
    shown = {name.removeprefix("docstring-") for page in PAGES for name in gen.regions(page.read_text())}
    shown = {name for name in shown if not name.startswith(("bench-", "value-", "fields-"))} - set(gen.GENERATORS)
    assert {"echoq.worker", "echoq.durability"} <= shown
    typed = {page.name: _runs(gen.REGION.sub("", page.read_text())) for page in PAGES}
    for module in sorted(shown):
        said = _runs(importlib.import_module(module).__doc__ or "")
        for page, runs in typed.items():
            again = sorted(said & runs)
            assert not again, f"docs/{page} types again what {module}'s docstring says: {' '.join(again[0])!r}"


# -- the benchmarks' figures: stored runs, never typed ------------------------------------------


def _bench_headers() -> list[tuple[str, set[str]]]:
    """The column names each bench prints: every list of three or more strings in bench/*.py,
    and every ``| a | b | c |`` string, as a set of cells."""
    found = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.List) and len(node.elts) >= 3:
                if all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                    found.append((path.name, {e.value.strip() for e in node.elts}))  # type: ignore[attr-defined]
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("| "):
                found.append((path.name, {c.strip() for c in node.value.strip().strip("|").split("|") if c.strip()}))
    return found


def bench_output_typed(text: str, headers: list[tuple[str, set[str]]]) -> list[str]:
    """Where a page holds a bench's output outside a generated region: a ``machine:`` line,
    or a table whose header has three column names of one bench's table."""
    lines = gen.REGION.sub("<!-- a generated region -->", text).splitlines()
    found = []
    for n, line in enumerate(lines, 1):
        if re.match(r"^\s*machine: \d+ cores", line):
            found.append(f"{n}: a bench's machine line")
        rule = lines[n] if n < len(lines) else ""
        if line.lstrip().startswith("|") and re.fullmatch(r"\s*\|[\s:|-]+", rule):
            cells = {c.strip() for c in line.strip().strip("|").split("|") if c.strip()}
            bench = next((name for name, h in headers if len(cells & h) >= 3), None)
            if bench:
                found.append(f"{n}: a table of bench/{bench}")
    return found


def test_no_page_types_a_bench_s_output() -> None:
    """Figures of a bench are a stored run shown in a generated region (bench-<name>), never
    pasted: a pasted run goes stale the day the code changes, with no date to say so."""
    headers = _bench_headers()
    typed = [f"{page.name}:{where}" for page in PAGES for where in bench_output_typed(page.read_text(), headers)]
    assert not typed, "a bench's output typed into a page: store it (tools/store_run.py) and show it\n" + "\n".join(
        typed
    )
    planted = "x\n```\nsoak\nmachine: 2 cores, CPython 3.11\n```\n"
    planted += "| panel | clicks | p95 ms | first frame median ms |\n|---|---|---:|---:|\n"
    assert bench_output_typed(planted, headers) == ["4: a bench's machine line", "6: a table of bench/lab_latency.py"]
    region = "<!-- generated: bench-soak -->\nmachine: 2 cores\n<!-- /generated -->\n"
    assert bench_output_typed(region, headers) == []


def test_every_stored_run_is_on_a_page_and_a_page_shows_its_run_as_the_bench_renders_it() -> None:
    stored = {p.stem: json.loads(p.read_text()) for p in sorted((gen.DATA / "bench").glob("*.json"))}
    shown = {
        name.removeprefix("bench-"): page
        for page in PAGES
        for name in gen.regions(page.read_text())
        if name.startswith("bench-")
    }
    assert "startup" in stored and {"throughput", "latency", "soak", "cluster_failover"} <= set(shown)
    for name, run in stored.items():
        assert name in shown, f"docs/data/bench/{name}.json is shown on no page: mark <!-- generated: bench-{name} -->"
        assert {"date", "commit", "command", "report"} <= set(run) and "machine" in run["report"], name
        assert run["command"].startswith(f"python bench/{name.split('.')[0]}.py --json"), name
        assert "load" in run or name == "startup", f"{name}: stored without the machine's load"
        page = gen.fill(shown[name].read_text())
        assert gen.bench_shown(name, run) in page and run["date"] in page, f"{shown[name].name} does not show {name}"
    for name, page in shown.items():
        if name.split(".")[0] not in {p.stem for p in gen.benches()}:
            raise AssertionError(f"docs/{page.name} shows bench-{name}: there is no bench/{name.split('.')[0]}.py")
        if name not in stored:
            assert f"tools/store_run.py {name}" in gen.bench(name)  # the page says how to store it


def test_store_run_plans_each_bench_with_the_options_it_was_stored_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("store_run", ROOT / "tools" / "store_run.py")
    assert spec and spec.loader
    store_run = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "store_run", store_run)  # its dataclass looks its module up
    spec.loader.exec_module(store_run)
    monkeypatch.setattr(store_run, "STORED", tmp_path)
    (tmp_path / "endurance.json").write_text(
        json.dumps({"command": "python bench/endurance.py --json --plot docs/x.png", "date": "d"})
    )
    (soak, endurance, redis7) = store_run.plan(["soak", "endurance", "soak.redis7"], None)
    assert (soak.options, endurance.options, redis7.options) == ([], ["--plot", "docs/x.png"], [])
    assert redis7.script.name == "soak.py" and redis7.out == tmp_path / "soak.redis7.json"
    (only,) = store_run.plan(["soak.redis7"], ["--binary", "/usr/bin/redis-server"])
    assert only.options == ["--binary", "/usr/bin/redis-server"]
    for names, options, why in (
        (["soak", "startup"], ["--quick"], "go to one bench"),
        (["nothing"], None, "no bench/nothing.py"),
        (["../soak"], None, "no bench/"),
        ([], None, "name a bench"),
    ):
        with pytest.raises(ValueError, match=why):
            store_run.plan(names, options)


def test_the_race_explorer_s_counts_on_the_lab_page_are_lesson_04_s() -> None:
    """docs/lab.md says the explorer's counts; lesson 04 shows (and nbval compares) them."""
    lesson = json.loads((ROOT / "notebooks" / "04_stalled_recovery.ipynb").read_text())
    cell = next(c for c in lesson["cells"] if "".join(c["source"]).startswith("atomic = race.model.explore"))
    two_step, atomic = ast.literal_eval("".join(cell["outputs"][0]["data"]["text/plain"]))
    said = (ROOT / "docs" / "lab.md").read_text()
    total = sum(two_step.values())
    assert f"the two-step reaper: {total} interleavings; the atomic one: {sum(atomic.values())}" in said
    assert two_step["late"] == two_step["lost"] == 0  # the page names the three outcomes that occur
    once, duplicated, dead = two_step["once"], two_step["duplicated"], two_step["dead-lettered"]
    assert f"two-step, once {once},\nduplicated {duplicated}, dead-lettered {dead}" in said
