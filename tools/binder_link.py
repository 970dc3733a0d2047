"""This repository's Binder link, derived from its git remote (``make binder-link``).

    python tools/binder_link.py                     # the link and the badge, from `origin`
    python tools/binder_link.py --remote URL        # from another address
    python tools/binder_link.py --write-readme      # ... and put the badge in README.md

GitHub remotes (https or ssh) give ``mybinder.org/v2/gh/<owner>/<repo>/HEAD``, GitLab ones
``v2/gl/<owner%2Frepo>/HEAD``, any other public git URL ``v2/git/<url>/HEAD``. The link opens
lesson 00 in JupyterLab. With no remote the tool says so in one line and exits 1: there is
no address to guess, and a placeholder link would launch nothing.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
LESSON = "notebooks/00_start_here.ipynb"
BADGE_START, BADGE_END = "<!-- binder-badge -->", "<!-- /binder-badge -->"

_SCP = re.compile(r"^(?:[\w.-]+@)?(?P<host>[\w.-]+):(?P<path>[^/].*)$")  # git@github.com:owner/repo.git
_URL = re.compile(r"^(?:https?|ssh|git)://(?:[^@/]+@)?(?P<host>[\w.-]+)(?::\d+)?/(?P<path>.+)$")


def binder_url(remote: str, lesson: str = LESSON) -> str:
    """The mybinder.org launch link for the git remote ``remote``, opening ``lesson`` in JupyterLab."""
    remote = remote.strip()
    found = _URL.match(remote) or _SCP.match(remote)
    if not found:
        raise ValueError(f"{remote!r} is not a git remote URL (https://host/owner/repo or git@host:owner/repo)")
    host, path = found.group("host").lower(), found.group("path").strip("/").removesuffix(".git")
    tail = f"HEAD?urlpath=lab/tree/{lesson}"
    if host == "github.com" and path.count("/") == 1:
        return f"https://mybinder.org/v2/gh/{path}/{tail}"
    if host == "gitlab.com":
        return f"https://mybinder.org/v2/gl/{quote(path, safe='')}/{tail}"
    public = remote if remote.startswith("https://") else f"https://{host}/{path}"
    return f"https://mybinder.org/v2/git/{quote(public, safe='')}/{tail}"


def badge(url: str) -> str:
    return f"[![Launch on Binder](https://mybinder.org/badge_logo.svg)]({url})"


def origin(root: Path = ROOT) -> str | None:
    result = subprocess.run(["git", "remote", "get-url", "origin"], cwd=root, capture_output=True, text=True)
    return result.stdout.strip() or None if result.returncode == 0 else None


def write_readme(readme: Path, url: str) -> None:
    text = readme.read_text()
    start, end = text.index(BADGE_START) + len(BADGE_START), text.index(BADGE_END)
    readme.write_text(text[:start] + badge(url) + text[end:])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--remote", help="git remote URL (default: `git remote get-url origin`)")
    parser.add_argument("--write-readme", action="store_true", help="write the badge into README.md")
    args = parser.parse_args(argv)
    remote = args.remote or origin(Path.cwd())
    if not remote:
        print(
            "binder-link: this checkout has no git remote 'origin', so its public address is unknown; "
            "push it to GitHub and run `git remote add origin https://github.com/<owner>/<repo>`, "
            "or pass REMOTE=<url> (make binder-link REMOTE=...)",
            file=sys.stderr,
        )
        return 1
    try:
        url = binder_url(remote)
    except ValueError as exc:
        print(f"binder-link: {exc}", file=sys.stderr)
        return 1
    print(url)
    print(badge(url))
    if args.write_readme:
        write_readme(ROOT / "README.md", url)
        print("README.md: badge written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
