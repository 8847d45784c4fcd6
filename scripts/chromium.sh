#!/usr/bin/env bash
# Make sure Debian's headless-capable Chromium is installed for the report's browser test
# (Playwright drives it; it cannot download a browser of its own here) and print its path.
set -euo pipefail

if ! command -v chromium >/dev/null; then
  echo "chromium.sh: installing Debian's chromium package (a system change, left installed;" \
    "only what is missing: no installed package is upgraded)" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >&2
  $SUDO apt-get install -y -qq --no-upgrade --no-install-recommends chromium >&2
fi
command -v chromium
