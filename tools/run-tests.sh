#!/usr/bin/env bash
# What `make test` runs once the venv is set up (docs/TESTING.md). Three jobs share the two
# cores from the start, because most tests wait on servers, leases, kernels and pages rather
# than compute, and the browser tests alone would leave a core idle:
#   - the site, built strictly (a broken link, a missing page or any warning fails), holding
#     build/site.lock: the tests that read the site take the lock and wait for this build;
#   - the browser tests (what Chromium shows in JupyterLab, Voila and the hub), in a pytest of
#     their own with two workers, one test file each at a time, while npm fetches the hub's
#     proxy beside them; then the files in WITH_BROWSER_JOB (tests/conftest.py: the exercises'
#     judges, the workshop's people, lesson 07), which mostly wait, so that job's workers keep
#     their core busy to the end and both jobs end at about the same time;
#   - every other test, in three xdist workers, one file (one notebook) each at a time, the
#     longest first (tests/conftest.py orders them; xdist must keep that order).
# Exit status: non-zero if any of the three failed. The browser and site logs are printed
# after the other tests' output, so each job reads in one piece.
set -u
cd "$(dirname "$0")/.."
# Each module's bytecode is written once (into __pycache__) and read from then on. Where the
# environment says not to (PYTHONDONTWRITEBYTECODE, set on some images) and pip installed
# without compiling (make setup), each of the hundreds of Python processes the suite starts
# (pytest workers, kernels, Jupyter servers, worker processes) would compile every module it
# imports anew: about 2.5 s of CPU for each Jupyter server or kernel.
unset PYTHONDONTWRITEBYTECODE
BIN=.venv/bin
mkdir -p build

bash tools/system-deps.sh
"$BIN/ruff" check echoq tests bench tools conftest.py || exit 1
# Where node is missing, apt-get installs it now, before any test runs, so every test sees
# the same machine; where it is there, npm fetches the proxy in the browser job below.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || bash tools/hub-deps.sh

flock build/site.lock make --no-print-directory docs >build/docs.log 2>&1 &
docs=$!
# The browser job names its files (tests/conftest.py's BROWSER_MODULES and WITH_BROWSER_JOB)
# rather than collecting every test to keep a few hundred: a collection is seconds of CPU
# in each of its three processes. The other job leaves those files out.
browser_files=$("$BIN/python" -c 'from tests.conftest import BROWSER_MODULES as m, WITH_BROWSER_JOB as w; print(*sorted({f"tests/{f}" for f in m} | w))')
beside=$("$BIN/python" -c 'from tests.conftest import WITH_BROWSER_JOB as w; print(*sorted(f"--ignore={f}" for f in w))')
# npm fetches the hub's proxy beside the browser tests rather than before them: on a fresh
# clone that took 35 s, while both cores had room. The hub test waits for it (hub-deps.sh
# marks its install in progress; the mark is made here, before either job starts).
if [ ! -x build/hub/node_modules/.bin/configurable-http-proxy ]; then
  mkdir -p build/hub && touch build/hub/.installing
fi
bash tools/hub-deps.sh >build/hub-deps.log 2>&1 &
hubdeps=$!
"$BIN/python" -m pytest -n 2 --dist loadfile --no-loadscope-reorder $browser_files >build/browser-tests.log 2>&1 &
browser=$!

"$BIN/python" -m pytest -n 3 --dist loadfile --no-loadscope-reorder -m "not browser" $beside --durations=25
others=$?
wait "$docs"
site=$?
wait "$browser"
shown=$?
wait "$hubdeps"  # done already unless no hub test ran; its log is printed below

echo; echo "== the site (make docs) =="; cat build/docs.log
echo; echo "== the browser tests, then the exercises' judges =="; cat build/hub-deps.log build/browser-tests.log
echo
echo "make test: ruff passed; site $([ $site = 0 ] && echo built || echo FAILED);" \
  "tests without a browser $([ $others = 0 ] && echo passed || echo FAILED);" \
  "browser tests and judges $([ $shown = 0 ] && echo passed || echo FAILED)"
[ $others = 0 ] && [ $site = 0 ] && [ $shown = 0 ]
