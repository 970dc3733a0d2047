#!/usr/bin/env bash
# configurable-http-proxy, the proxy JupyterHub runs in front of itself, for the JupyterHub
# browser test (tests/test_workshop_guide.py): installed from npm into build/hub/, never globally.
# Needs node and npm; as root with apt-get they are installed when missing. Elsewhere
# without them nothing is installed and it says what to install (the hub's tests skip, with
# the reason; under CI they fail).
set -u
cd "$(dirname "$0")/.."
version="${CHP_VERSION:-5.3.0}"
dest=build/hub
# While this runs, $dest/.installing exists (make test creates it before starting this beside
# the browser tests): the hub test waits for it to go (tests/support/hub.py's proxy_path) rather
# than skip. It goes however this ends.
trap 'rm -f "$dest/.installing"' EXIT
proxy="$dest/node_modules/.bin/configurable-http-proxy"
[ -x "$proxy" ] && exit 0
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "hub-deps: node and npm are missing, and only root with apt-get installs them: install nodejs and npm, or run \`npm install -g configurable-http-proxy\` yourself"
    exit 0
  fi
  echo "hub-deps: installing nodejs and npm with apt-get"
  bash tools/system-deps.sh nodejs npm
  command -v npm >/dev/null 2>&1 || { echo "hub-deps: npm is still missing after apt-get: install nodejs and npm by hand"; exit 0; }
fi
mkdir -p "$dest"
touch "$dest/.installing"
echo "hub-deps: installing configurable-http-proxy@$version into $dest (npm)"
npm install --prefix "$dest" --no-audit --no-fund --no-save --loglevel=error "configurable-http-proxy@$version" \
  >/tmp/echoq-npm.log 2>&1 \
  || echo "hub-deps: npm could not install configurable-http-proxy (its log: /tmp/echoq-npm.log); the hub cannot start without it"
exit 0
