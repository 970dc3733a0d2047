#!/usr/bin/env bash
# make shared-env: the kit where every learner's Unix user can run it (docs/WORKSHOP.md).
# The class hub starts each learner's server and kernels as that learner, with a Python they
# must be able to run. This checkout's venv often is not one: its Python links into the
# Python it was made from, which pyenv keeps under /root (mode 0700), and the checkout itself
# may sit in a folder only its owner opens. So this makes, in one folder readable by all:
#   <dir>/src   a copy of this checkout's files (tracked and untracked, not the ignored ones)
#   <dir>/venv  a venv over a Python that a user with no rights of ours can run, the kit
#               installed editable from <dir>/src with JupyterHub's single-user server
# then runs the hub's own check as the user nobody. `make hub` uses <dir>/venv/bin/python.
# Run it again after changing the checkout: it replaces <dir>/src and updates the venv.
set -euo pipefail
dir=${1:?usage: tools/shared-env.sh DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$here/.venv/bin
mark=.echoq-shared-env

if [ "$(id -u)" != 0 ]; then
  echo "shared-env: run it as root (sudo make shared-env): it checks the result as the user nobody" >&2
  exit 2
fi
if [ -e "$dir" ] && [ ! -e "$dir/$mark" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
  echo "shared-env: $dir holds something this did not make; choose another SHARED_ENV=DIR" >&2
  exit 2
fi

# A Python that nobody can run: the system's of the venv's version first (same ABI), then any.
version=$("$bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
python=
for candidate in "/usr/bin/python$version" "/usr/local/bin/python$version" /usr/bin/python3; do
  if [ -x "$candidate" ] && runuser -u nobody -- "$candidate" -c 'import venv' >/dev/null 2>&1; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "shared-env: no Python $version that every user can run (with its venv module); install one" \
    "(Debian: apt-get install python3-venv) and run this again" >&2
  exit 2
fi

mkdir -p "$dir"
chmod 755 "$dir"
touch "$dir/$mark"
rm -rf "$dir/src.new"
mkdir "$dir/src.new"
# The working tree as it is (uncommitted changes too), without what git ignores (.venv, build).
git -C "$here" ls-files -z --cached --others --exclude-standard \
  | (cd "$here" && tar --null -T - -cf -) | tar -C "$dir/src.new" -xf -
rm -rf "$dir/src"
mv "$dir/src.new" "$dir/src"
[ -x "$dir/venv/bin/python" ] || "$python" -m venv "$dir/venv"
# uv (in this checkout's venv, from make setup) installs from its cache in seconds; pip otherwise.
jupyterhub=$("$bin/python" -c 'from importlib.metadata import version; print(version("jupyterhub"))')
"$bin/uv" pip install -q --compile-bytecode --python "$dir/venv/bin/python" -e "$dir/src[teaching]" \
  "jupyterhub==$jupyterhub" \
  || "$dir/venv/bin/python" -m pip install -q -e "$dir/src[teaching]" "jupyterhub==$jupyterhub"
chmod -R a+rX "$dir"

check=$("$bin/python" -c 'from echoq.teaching.workshop.hub import LEARNER_PYTHON_CHECK as c; print(c)')
if ! (cd / && runuser -u nobody -- "$dir/venv/bin/python" -c "$check"); then
  echo "shared-env: the user nobody cannot run the kit with $dir/venv/bin/python (see above)" >&2
  exit 2
fi
echo "shared-env: every user can run the kit with $dir/venv/bin/python; make hub uses it" \
  "(or: make hub LEARNER_PYTHON=$dir/venv/bin/python)"
