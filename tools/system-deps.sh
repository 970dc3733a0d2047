#!/usr/bin/env bash
# Debian packages some tests use, installed when missing and when we can (root + apt-get):
#   redis-server  -- the integration suite also runs against Redis 7 (tests skip without it)
#   chromium      -- the browser tests drive it through Playwright (never a browser download)
# Extra names on the command line are installed too. As an ordinary user nothing is
# installed: the tests that need a package say so when they skip.
set -u
want=(redis-server chromium "$@")
declare -A binary_of=([redis-server]=redis-server [chromium]=chromium [nodejs]=node)
missing=()
for pkg in "${want[@]}"; do
  command -v "${binary_of[$pkg]:-$pkg}" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: not root or no apt-get; tests needing ${missing[*]} will be skipped"
  exit 0
fi
echo "system-deps: installing ${missing[*]} with apt-get"
# Keep the package from starting a system-wide server of its own: our tests start private
# servers on free loopback ports with passwords, and nothing else should listen.
policy=/usr/sbin/policy-rc.d
had_policy=0; [ -e "$policy" ] && had_policy=1
[ $had_policy = 1 ] || { printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; }
export DEBIAN_FRONTEND=noninteractive
{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/tmp/echoq-apt.log 2>&1 \
  || echo "system-deps: apt-get failed (see /tmp/echoq-apt.log); tests needing ${missing[*]} will be skipped"
[ $had_policy = 1 ] || rm -f "$policy"
exit 0
