"""Bring the notebooks to the course's form; safe to run again (it changes nothing the second time).

    .venv/bin/python tools/lesson_notebooks.py          # rewrite notebooks/*.ipynb in place
    .venv/bin/python tools/lesson_notebooks.py --check  # exit 1 and name each notebook it would change

Notebooks merge badly, so what several changes do to them is one script, run again after a
merge. Each notebook is read and written as stored (JSON, indent 1, nbformat 4), and only
these are changed:

- nbval's markers move from a visible first-line comment (``# NBVAL_CHECK_OUTPUT``) to the
  cell's tags (``nbval-check-output``), which nbval 0.11 reads the same way; a learner sees none;
- every lesson's glossary link opens ``glossary.ipynb``, written here from docs/GLOSSARY.md: a
  notebook opens in JupyterLab, Notebook 7 and Voila alike, where ``../docs/GLOSSARY.md`` is
  outside the server's folder (a 404); the site points the same link at its glossary page;
- lesson 00's table of lessons is made from the lessons themselves (title, what the learner
  will be able to do, time), and lesson 00 shows how to attach another client to its server;
- each stored predict-then-run question, as echoq/teaching/predictions.py words it now;
- after an exercise's solution, the feedback on one of its catalogue's wrong answers (REJECTED);
- an exercise's cells made from its folder (EXERCISE_CELLS): what it asks, its stub as the
  learner's cell, its check and its solution;
- the EDITS below: words the code no longer says, and cells whose last line printed a value
  the prose does not explain (each now asserts it, or keeps it), with the stored output that
  goes with the new source.
"""

from __future__ import annotations

import json
import pprint
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
MARKERS = {
    "# NBVAL_CHECK_OUTPUT": "nbval-check-output",
    "# NBVAL_IGNORE_OUTPUT": "nbval-ignore-output",
    "# NBVAL_RAISES_EXCEPTION": "nbval-raises-exception",
    "# NBVAL_SKIP": "nbval-skip",
}
OLD_GLOSSARY_LINK = "](../docs/GLOSSARY.md)"
GLOSSARY_LINK = "](glossary.ipynb)"

# (notebook, cell id, old text, new text): a replacement in that cell's source, made once.
EDITS: list[tuple[str, str, str, str]] = [
    (
        "02_recoverable_claim.ipynb",
        "c16",
        "Pick a step with the **step** buttons to\nlight its path",
        "Pick a move under **read the Lua of** to\nlight its path",
    ),
    ("02_recoverable_claim.ipynb", "c11", "q.reap() == [job]", "assert q.reap() == [job]  # back in pending"),
    (
        "02_recoverable_claim.ipynb",
        "c18",
        "\nlab.model.reset()  # the lab is yours",
        "\nassert lab.model.reset()  # the lab is yours",
    ),
    (
        "04_stalled_recovery.ipynb",
        "c29",
        "\nlab.model.reset()  # the lab is yours",
        "\nassert lab.model.reset()  # the lab is yours",
    ),
    (
        "05_worker_path.ipynb",
        "c10",
        "\ncourse.wait_until(lambda: rescuer",
        "\nrescued_in_s = course.wait_until(lambda: rescuer",
    ),
    ("05_worker_path.ipynb", "c15", "\nm.kill(1)", "\nassert m.kill(1)"),
    ("05_worker_path.ipynb", "c16", "\nm.stop_all()", "\nassert m.stop_all()"),
    (
        "03_at_least_once.ipynb",
        "*",
        "A would retire the job B is working on",
        "A would complete the job B is working on",
    ),
    (
        "03_at_least_once.ipynb",
        "*",
        "below retires the job whoever calls it",
        "below completes the job whoever calls it",
    ),
    (
        "04_stalled_recovery.ipynb",
        "*",
        "then apply the seed's rule to the **new** count.",
        "then compare the **new** count with `max_stalled`: the `max_stalled`-th stall is fatal.",
    ),
    (
        "04_stalled_recovery.ipynb",
        "c09",
        '    """Step 2: move each id from keys.active to keys.pending (score 0) and mark its row pending."""\n',
        '    """Step 2: put each id back in keys.pending at its arrival number (its row keeps it), as reap.lua\n'
        "    does, then mark its row pending, and only then take it out of keys.active: a crash between any\n"
        '    two writes leaves the job where a claim, reap.lua or this reaper run again can run it."""\n',
    ),
    (
        "04_stalled_recovery.ipynb",
        "c08",
        "Write them as two steps on purpose: this is the contrast.",
        "Write them as two steps on purpose: this is the contrast.\n"
        "\n"
        "Pending is first in, first out: each job is scored by its arrival number (the order it\n"
        'reached the server), which its row keeps (`r.hget(keys.job(id), "arrival")`). Put a job back\n'
        "at that number, as `reap.lua` does: ahead of every job that arrived after it. And mind the\n"
        "order of your writes, for a worker can be killed between any two of them: out of active\n"
        "first, and a crash right after leaves the job in no set at all, lost; the row marked first,\n"
        "and `reap.lua`, sweeping next, finds an active job whose row says *pending* and dead-letters\n"
        "it as corrupt. Add the job to pending first, then mark its row, and take it out of active last.",
    ),
    (
        "04_stalled_recovery.ipynb",
        "c20",
        "library takes it.",
        "library takes it. Last, it kills your `move_back` between any two of its writes: what a\n"
        "crash leaves must lose no job, must leave none that a claim or `reap.lua` would dead-letter\n"
        "(in pending while its row still says *active*, or in active while it already says\n"
        "*pending*), and your reaper, run again, must finish the move.",
    ),
    (
        "present.ipynb",
        "*",
        "its attempt no longer matches `attempts`.",
        "its token no longer matches the row's `token`.",
    ),
    ("present.ipynb", "*", "Every job is a token: a circle", "Every job is a marker: a circle"),
    ("present.ipynb", "*", "animates the tokens from place", "animates the markers from place"),
    (
        "04_stalled_recovery.ipynb",
        "c22a",
        "fared: delivered **once** after the crash, **duplicated**, or **lost**.",
        "fared: delivered **once** after the crash, **duplicated**, or not delivered: **dead-lettered**\n"
        "(in the dead set, until someone requeues it), **late** (still where the next reap or claim\n"
        "finds it, so not lost) or **lost** (in no set at all).",
    ),
    (
        "04_stalled_recovery.ipynb",
        "c22c",
        'assert atomic == {"once": 6, "duplicated": 0, "lost": 0} and',
        'assert atomic["once"] == sum(atomic.values()) == 6 and',
    ),
    (
        "04_stalled_recovery.ipynb",
        "c22d",
        "a **×** a\nlost job (a claim that came between `ZADD` and `HSET` found the row still saying *active*\n"
        "and dead-lettered it).",
        "a **d** a\ndead-lettered job (a claim that came between `ZADD` and `HSET` found the row still saying\n"
        "*active* and moved the job to the dead set as corrupt).",
    ),
    (
        "04_stalled_recovery.ipynb",
        "c22d",
        "every interleaving leaves the job in\n`emq:{q}:active` for good: 30 lost.",
        "every interleaving leaves the job in\n`emq:{q}:active` under its expired lease: 30 **late** (marked ○), "
        "not lost, since the\nnext reap brings it back, but neither reaper did.",
    ),
    (
        "07_beyond_one_server.ipynb",
        "d2be5998",
        '[line.strip() for line in claim_lua if "prefix = string.sub(first" in line or "local row = prefix" in line]',
        'wanted = ("prefix = string.sub(first", "local row = q.prefix")\n'
        "[next(line.strip() for line in claim_lua if piece in line) for piece in wanted]",
    ),
    (
        "07_beyond_one_server.ipynb",
        "407ce9ba",
        "`dead` (KEYS[1]) to `pending` (KEYS[2]), set its row's `state` to `pending` and its\n"
        "`stalled` count to 0 (leave `token` alone: it is the fencing token). The row's key is\n"
        "not in KEYS: the script builds it.",
        "`dead` (KEYS[1]) to `pending` (KEYS[2]) at its place in line (the row's `arrival`), and\n"
        "give it fresh tries: its row says `state` `pending`, with `stalled` and `attempts` back to\n"
        "0 (leave `token` alone: it is the fencing token). The row's key is\n"
        "not in KEYS: the script builds it. The library ships this move as `Queue.requeue_dead`\n"
        "(and `python -m echoq dead requeue`), which takes each row in KEYS and at most 1000 ids a\n"
        "call.",
    ),
    (
        "07_beyond_one_server.ipynb",
        "8763a948",
        "  redis.call('ZREM', KEYS[1], id)\n"
        "  redis.call('ZADD', KEYS[2], 0, id)\n"
        "  -- the job's row: which key is it? (state pending, and a fresh stall count)\n"
        "  redis.call('HSET', 'job:' .. id, 'state', 'pending', 'stalled', 0)\n",
        "  local row = 'job:' .. id  -- the job's row: which key is it?\n"
        "  redis.call('ZREM', KEYS[1], id)\n"
        "  redis.call('ZADD', KEYS[2], redis.call('HGET', row, 'arrival') or 0, id)  -- its place in line\n"
        "  redis.call('HSET', row, 'state', 'pending', 'stalled', 0, 'attempts', 0)  -- fresh tries\n",
    ),
]
# Cells whose stored value the new source no longer shows: (notebook, cell id) -> the text
# their source has once edited (a cell another change rewrote keeps its outputs).
NO_VALUE = {
    ("02_recoverable_claim.ipynb", "c11"): "assert q.reap() == [job]",
    ("02_recoverable_claim.ipynb", "c18"): "assert lab.model.reset()",
    ("04_stalled_recovery.ipynb", "c29"): "assert lab.model.reset()",
    ("05_worker_path.ipynb", "c10"): "rescued_in_s = course.wait_until(",
    ("05_worker_path.ipynb", "c15"): "assert m.kill(1)",
    ("05_worker_path.ipynb", "c16"): "assert m.stop_all()",
}

# After an exercise's solution, its lesson shows the check's feedback on one wrong answer of the
# catalogue, picture included: notebook -> (exercise, wrong answer, what that answer does).
REJECTED = {
    "02_recoverable_claim.ipynb": ("claim", "row-not-active", "a claim that never marks its row active"),
    "03_at_least_once.ipynb": ("complete", "fence-on-attempts", "a fenced complete that compares attempts"),
    "04_stalled_recovery.ipynb": ("stall", "dead-in-two-places", "a sweep that writes a dead job into pending too"),
}
REJECTED_MD = (
    "### What a rejected answer looks like\n"
    "\n"
    "When the check rejects an answer, its feedback draws the run it judged under the ✗ line: the\n"
    "queue as the server held it when the line was written, with what the processes and the check\n"
    "did, in order -- or, where your move was compared with the reference move, the two side by\n"
    "side from the same starting state, and your commands one by one (step through them in a live\n"
    "notebook). What the ✗ line names is ringed, heavy-edged or on yellow. Here, {what}, from the\n"
    "exercise's catalogue of wrong answers:"
)


def rejected_example(name: str, nb: dict[str, Any]) -> None:
    """The cells that show a rejected answer's feedback, after the exercise's solution."""
    if name not in REJECTED:
        return
    key, wrong, what = REJECTED[name]
    ensure_cells(
        nb,
        lambda cell: f'exercises.solution("{key}")' in text_of(cell),
        [
            (f"rejected-{key}-md", "markdown", REJECTED_MD.format(what=what)),
            (f"rejected-{key}", "code", f'exercises.example("{key}", "{wrong}")'),
        ],
    )


# Exercises whose cells are made from their folder: notebook -> (exercise, the cell they go
# after (its first line), the variable the learner's script is kept in, what the exercise asks).
EXERCISE_CELLS = {
    "05_worker_path.ipynb": (
        "release",
        'exercises.solution("loop")',
        "my_release",
        "## Exercise: give a claimed job back\n"
        "\n"
        "A worker that stops gives back, at once, the jobs it claimed but has not started (`echoq.Worker`\n"
        "claims a few ahead): another worker takes them without waiting out a lease. The library's\n"
        "`release_many.lua` does it for many jobs in one call; write it for one. Reply `{'stale'}`,\n"
        "changing nothing, unless the caller still holds the job (the row's state is `'active'` and\n"
        "its `token` is the caller's token). Otherwise take the job out of active, mark its row\n"
        "`'pending'`, give back the try its claim counted (the row's `attempts`: the job never\n"
        "started), and put it back in pending at its own place in line, the row's `arrival` (0 when\n"
        "it has none). The stub gives back anyone's job, to the front of the line, and keeps the try.\n"
        "\n"
        "The check runs your script and the reference release on the same queues, both reading one\n"
        "fixed server time, and compares every key they leave: for the worker that holds the job, for\n"
        "a worker A whose job B claimed after A's lease ran out, for a worker A whose job the reaper\n"
        "had already put back; then on generated queues, as lesson 03's check did.",
    ),
}


def exercise_cells(name: str, nb: dict[str, Any]) -> None:
    """An exercise's cells, from its folder: what it asks, the stub, the check, the solution."""
    if name not in EXERCISE_CELLS:
        return
    sys.path.insert(0, str(ROOT))
    from echoq.teaching import exercises

    key, after, variable, asks = EXERCISE_CELLS[name]
    ex = exercises.EXERCISES[key]
    ensure_cells(
        nb,
        lambda cell: text_of(cell).strip() == after,
        [
            (f"exercise-{key}-md", "markdown", asks),
            (f"exercise-{key}", "code", f'{variable} = """\n{ex.stub}"""'),
            (f"exercise-{key}-check", "code", f"exercises.{ex.check.__name__}({variable})"),
            (f"exercise-{key}-solution", "code", f'exercises.solution("{key}")'),
        ],
    )


def ensure_cells(
    nb: dict[str, Any], after: Callable[[dict[str, Any]], bool], wanted: list[tuple[str, str, str]]
) -> bool:
    """The cells ``wanted`` (id, type, text), in that order: inserted after the first cell
    ``after`` picks where the notebook lacks them, each given its text now. True if any was new
    (a new code cell has no output until tools/run_notebooks.py runs it)."""
    cells = nb["cells"]
    have = {cell.get("id") for cell in cells}
    new = [
        {"cell_type": kind, "id": cell_id, "metadata": {}, "source": []}
        | ({"execution_count": None, "outputs": []} if kind == "code" else {})
        for cell_id, kind, _text in wanted
        if cell_id not in have
    ]
    if new:
        at = next(n for n, cell in enumerate(cells) if after(cell)) + 1
        cells[at:at] = new
    by_id = {cell.get("id"): cell for cell in cells}
    for cell_id, _kind, text in wanted:
        set_text(by_id[cell_id], text)
    return bool(new)


ATTACH_MD = (
    "## Looking with your own client\n"
    "\n"
    "The server is an ordinary Valkey: any client can look at it while the lesson runs. The next\n"
    "cell prints how to attach `redis-cli` (or `valkey-cli`) from a terminal, or a second Python.\n"
    "It hides the password: run `lesson.attach(reveal=True)` to see it, and do not paste it\n"
    "anywhere others can read."
)
ATTACH_CODE = "lesson.attach()"


def text_of(cell: dict[str, Any]) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def set_text(cell: dict[str, Any], text: str) -> None:
    """The source as nbformat stores it: a list of lines, each keeping its newline."""
    cell["source"] = text.splitlines(keepends=True)


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def dump(nb: dict[str, Any]) -> str:
    """As nbformat writes it (indent 1, keys sorted, non-ASCII kept, a final newline)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def markers_to_tags(nb: dict[str, Any]) -> None:
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = text_of(cell).splitlines(keepends=True)
        kept = [line for line in lines if line.strip() not in MARKERS]
        if len(kept) == len(lines):
            continue
        tags = cell["metadata"].setdefault("tags", [])
        for line in lines:
            tag = MARKERS.get(line.strip())
            if tag and tag not in tags:
                tags.append(tag)
        set_text(cell, "".join(kept).rstrip("\n"))


def glossary_link(nb: dict[str, Any]) -> None:
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown" and OLD_GLOSSARY_LINK in text_of(cell):
            set_text(cell, text_of(cell).replace(OLD_GLOSSARY_LINK, GLOSSARY_LINK))


def glossary_notebook(previous: dict[str, Any] | None) -> dict[str, Any]:
    """docs/GLOSSARY.md as a notebook of one Markdown cell per section."""
    sections = re.split(r"\n(?=## )", (ROOT / "docs" / "GLOSSARY.md").read_text().strip())
    cells = [
        {
            "cell_type": "markdown",
            "id": f"glossary-{n}",
            "metadata": {},
            "source": part.strip().splitlines(keepends=True),
        }
        for n, part in enumerate(sections)
    ]
    cells.insert(
        1,
        {
            "cell_type": "markdown",
            "id": "glossary-source",
            "metadata": {},
            "source": ["*This notebook is docs/GLOSSARY.md, copied by tools/lesson_notebooks.py: edit that file.*"],
        },
    )
    metadata = previous["metadata"] if previous else load(NOTEBOOKS / "00_start_here.ipynb")["metadata"]
    return {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}


def lesson_row(path: Path) -> str:
    first = text_of(load(path)["cells"][0])
    title = re.search(r"^# (.+)$", first, re.M)
    able = re.search(r"\*\*What you will be able to do:\*\*\s*(.+?)(?:\n\n|$)", first, re.S)
    time = re.search(r"\*\*Time:\*\*\s*about ([^.]+)\.", first)
    if not (title and able and time):
        raise SystemExit(
            f"{path.name}: its first cell needs a '# NN · title', 'What you will be able to do' and 'Time'"
        )
    what = " ".join(able.group(1).split()).rstrip(".")
    return f"| [{title.group(1)}]({path.name}) | {what} | {time.group(1)} |"


def lessons_table() -> str:
    rows = [lesson_row(p) for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")) if not p.name.startswith("00_")]
    return "\n".join(["| lesson | you will be able to | time |", "|---|---|---|", *rows])


def lesson_00(nb: dict[str, Any]) -> None:
    cells = {cell.get("id"): cell for cell in nb["cells"]}
    course = cells["c16"]
    text = text_of(course)
    set_text(course, text[: text.index("| lesson |")] + lessons_table())
    wanted = [("attach-md", "markdown", ATTACH_MD), ("attach", "code", ATTACH_CODE)]
    if ensure_cells(nb, lambda cell: cell.get("id") == "c15", wanted):
        print("lesson 00 has a new cell: run tools/run_notebooks.py notebooks/00_start_here.ipynb to store its output")


def lesson_07_output(cell: dict[str, Any]) -> None:
    """The two Lua lines the cell now shows, as the registry expands claim.lua."""
    sys.path.insert(0, str(ROOT))
    from echoq import scripts

    claim_lua = scripts.expanded("claim").splitlines()
    wanted = ("prefix = string.sub(first", "local row = q.prefix")
    lines = [next(line.strip() for line in claim_lua if piece in line) for piece in wanted]
    shown = pprint.pformat(lines, width=79)  # as IPython's display breaks a long list
    for output in cell.get("outputs", []):
        if output["output_type"] == "execute_result":
            output["data"] = {"text/plain": shown.splitlines(keepends=True)}


ASK = re.compile(r"""^course\.ask\(\s*["'](\d\d)["']\s*,\s*["']([\w-]+)["']\s*\)$""")


def prediction_outputs(nb: dict[str, Any]) -> None:
    """Each stored question as echoq/teaching/predictions.py words it now (its text and HTML
    forms; the widget's view is left as stored)."""
    sys.path.insert(0, str(ROOT))
    from echoq.teaching.course import Prediction
    from echoq.teaching.predictions import QUESTIONS

    for cell in nb["cells"]:
        asked = ASK.match(text_of(cell).strip()) if cell["cell_type"] == "code" else None
        if not asked:
            continue
        shown = Prediction(*QUESTIONS[asked.group(1)][asked.group(2)])
        for output in cell.get("outputs", []):
            if output["output_type"] == "execute_result":
                output["data"]["text/plain"] = repr(shown).splitlines(keepends=True)
                output["data"]["text/html"] = shown._repr_html_().splitlines(keepends=True)


def edit(name: str, nb: dict[str, Any]) -> None:
    for notebook, cell_id, old, new in EDITS:
        if notebook != name:
            continue
        for cell in nb["cells"]:
            text = text_of(cell)
            if cell_id in ("*", cell.get("id")) and old in text and new not in text:
                set_text(cell, text.replace(old, new))
    for cell in nb["cells"]:
        edited = NO_VALUE.get((name, cell.get("id")))
        if edited and edited in text_of(cell):
            cell["outputs"] = [o for o in cell.get("outputs", []) if o["output_type"] != "execute_result"]
        if name.startswith("07_") and cell.get("id") == "d2be5998" and "for piece in wanted" in text_of(cell):
            lesson_07_output(cell)


SOLUTION = re.compile(r"""^exercises\.solution\(\s*["']([\w-]+)["']\s*\)$""")


def solution_outputs(nb: dict[str, Any]) -> None:
    """Each stored exercise solution as the exercise's reference is now (its HTML form)."""
    sys.path.insert(0, str(ROOT))
    from echoq.teaching import exercises

    for cell in nb["cells"]:
        shown = SOLUTION.match(text_of(cell).strip()) if cell["cell_type"] == "code" else None
        if not shown:
            continue
        for output in cell.get("outputs", []):
            if output["output_type"] == "execute_result" and "text/html" in output["data"]:
                output["data"]["text/html"] = exercises.solution(shown.group(1))._repr_html_().splitlines(keepends=True)


def transform(path: Path, nb: dict[str, Any]) -> dict[str, Any]:
    markers_to_tags(nb)
    glossary_link(nb)
    prediction_outputs(nb)
    solution_outputs(nb)
    edit(path.name, nb)
    exercise_cells(path.name, nb)
    rejected_example(path.name, nb)
    if path.name.startswith("00_"):
        lesson_00(nb)
    return nb


def main(argv: list[str]) -> int:
    check = "--check" in argv
    changed: list[str] = []
    glossary = NOTEBOOKS / "glossary.ipynb"
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        if path == glossary:
            continue
        before = path.read_text()
        after = dump(transform(path, json.loads(before)))
        if after != before:
            changed.append(path.name)
            if not check:
                path.write_text(after)
    before = glossary.read_text() if glossary.exists() else ""
    after = dump(glossary_notebook(json.loads(before) if before else None))
    if after != before:
        changed.append(glossary.name)
        if not check:
            glossary.write_text(after)
    for name in changed:
        print(f"{'would change' if check else 'changed'} notebooks/{name}")
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
