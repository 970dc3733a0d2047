"""The course site meets WCAG 2.1 AA as axe-core measures it: every page of the built site,
opened from file:// in Chromium, has no serious or critical violation of axe-core's rules for
WCAG 2.0 and 2.1, levels A and AA (contrast, names, keyboard reach, links told from text...).

axe-core comes from npm (pinned), installed into build/axe the first time this test runs; without
npm the test is skipped with the reason (under CI it fails: `make test` installs node first).
The pages are visited one after the other in one browser context, axe's source put into each
before its own scripts run.
What the site does to pass is in docs/assets/accessible/ (its colours, underlined links, and the
lessons' scrolling code cells made focusable).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.support.browser import browser, chromium, page  # noqa: F401  (fixtures)
from tests.support.servers import IN_CI
from tests.support.site import ROOT, built_site

pytestmark = pytest.mark.browser

AXE_VERSION = "4.14.1"  # pinned: a new axe-core can add rules, and a test run should not move with it
AXE_DIR = ROOT / "build" / "axe"
AXE_PACKAGE = AXE_DIR / "node_modules" / "axe-core"
WCAG_2_1_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
FAILING = ("serious", "critical")

# Only the violations come back (passes and incomplete results would be built for nothing);
# each is its rule, its impact and every node it failed on, with axe's first line of why.
RUN_AXE = """async (tags) => {
    const result = await axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']});
    return result.violations.map(v => ({
        rule: v.id, impact: v.impact,
        nodes: v.nodes.map(n => ({
            target: n.target.join(' '), why: ((n.failureSummary || '').split('\\n')[1] || '').trim(),
        })),
    }));
}"""


def with_axe(pg) -> None:
    """axe-core AXE_VERSION put into every page ``pg`` opens from now on, before the page's own
    scripts (an init script: Chromium compiles it once, not once a page as a script tag would be).
    Installed from npm into build/axe when it is not there."""
    AXE_DIR.mkdir(parents=True, exist_ok=True)
    with open(AXE_DIR / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs at once install it once
        if _installed_version() != AXE_VERSION:
            npm = shutil.which("npm")
            if npm is None:
                why = "axe-core comes from npm, and npm is missing here"
                if IN_CI:
                    pytest.fail(f"CI must check the site's accessibility, but {why}")
                pytest.skip(f"{why} (as root, `make test` installs nodejs and npm with apt-get)")
            done = subprocess.run(
                [npm, "install", "--prefix", str(AXE_DIR), "--no-audit", "--no-fund", "--no-save",
                 "--loglevel=error", f"axe-core@{AXE_VERSION}"],
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert done.returncode == 0 and _installed_version() == AXE_VERSION, (
                f"npm could not install axe-core@{AXE_VERSION} into {AXE_DIR}: {done.stderr.strip()[-500:]}"
            )
    pg.context.add_init_script(path=AXE_PACKAGE / "axe.min.js")


def _installed_version() -> str | None:
    with contextlib.suppress(OSError, ValueError):
        return json.loads((AXE_PACKAGE / "package.json").read_text())["version"]
    return None


def _violations(pg) -> list[dict]:
    """The serious and critical violations axe-core finds on the page ``pg`` shows."""
    return [v for v in pg.evaluate(RUN_AXE, WCAG_2_1_AA) if v["impact"] in FAILING]


def _described(name: str, violations: list[dict]) -> list[str]:
    """One line per element a violation names: the page, the rule, its impact, where, and why."""
    return [f"{name}: {v['rule']} ({v['impact']}) at {n['target']}: {n['why']}" for v in violations for n in v["nodes"]]


def test_axe_finds_what_the_site_had(page, tmp_path: Path) -> None:  # noqa: F811
    """The run this file makes does fail on the three kinds of violation the site had: code
    text at 4.47:1, a link told from its sentence by colour alone, a scrolling block no key reaches."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!doctype html><html lang="en"><head><title>bad</title></head><body><main>'
        '<pre style="background:#f5f5f5"><span style="color:#717171">x = 1  # comment</span></pre>'
        '<p style="color:#212121">A sentence with <a href="#" style="color:#4051b5;text-decoration:none">a link</a>'
        " in it, and more words around it.</p>"
        '<div style="overflow:auto;width:5em;height:2em"><pre>a line far too long for its box</pre></div>'
        "</main></body></html>"
    )
    with_axe(page)
    page.goto(bad.as_uri())
    found = {v["rule"] for v in _violations(page)}
    assert {"color-contrast", "link-in-text-block", "scrollable-region-focusable"} <= found, found


def test_every_page_of_the_site_meets_wcag_2_1_aa(page) -> None:  # noqa: F811
    site = built_site()
    with_axe(page)
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 30, f"the site has only {len(pages)} pages: was it built whole?"
    found: list[str] = []
    for path in pages:
        name = path.relative_to(site).as_posix()
        if name == "404.html":
            # The page a web server shows for a missing address, from the site's root: its links
            # start at "/" (mkdocs-material's), so it is read here with "/assets/" served from the site.
            page.route("file:///assets/**", _from(site))
        page.goto(path.as_uri())
        found += _described(name, _violations(page))
        if name == "404.html":
            page.unroute("file:///assets/**")
    shown = "\n".join(found[:40]) + (f"\n... and {len(found) - 40} more" if len(found) > 40 else "")
    assert not found, f"{len(found)} serious or critical WCAG 2.1 AA violations (axe-core {AXE_VERSION}):\n{shown}"


# At a phone's width more scrolls sideways: the tables (mkdocs-material's wrapper, which it
# leaves out of the tab order; TESTING.md's first has no link in it to reach it by) and more of
# a lesson's code cells.
PHONE = {"width": 390, "height": 844}
NARROW_PAGES = {"docs/TESTING.html": ".md-typeset__scrollwrap", "notebooks/00_start_here.html": ".highlight-ipynb"}
SCROLLS = "(kind) => Array.from(document.querySelectorAll(kind)).some(e => e.scrollWidth > e.clientWidth)"


def test_at_a_phone_s_width_what_scrolls_is_reachable_too(page) -> None:  # noqa: F811
    site = built_site()
    with_axe(page)
    page.set_viewport_size(PHONE)
    found: list[str] = []
    for name, kind in NARROW_PAGES.items():
        page.goto((site / name).as_uri())
        assert page.evaluate(SCROLLS, kind), f"{name}: no {kind} scrolls at {PHONE['width']} px: this tries nothing"
        found += _described(name, _violations(page))
    assert not found, "\n".join(found)


def _from(site: Path):
    def fulfil(route) -> None:
        route.fulfill(path=str(site / unquote(urlsplit(route.request.url).path).lstrip("/")))

    return fulfil
