#!/usr/bin/env bash
# Installs what building and testing the VS Code extension needs, once per machine:
# Node 24 (vsce, vitest and code-server all want >= 22; code-server exactly 24), code-server
# (a real VS Code served to a browser) and Debian's chromium with VS Code's native build
# dependencies. Everything but the Debian packages goes to one cache folder, so later runs on
# the same machine reuse it. Prints nothing but progress; source env.sh after it for PATH.
set -euo pipefail

NODE_VERSION=24.21.0
CODE_SERVER_VERSION=4.139.1
CACHE="${COMPLETER_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/completer-e2e}"
DEBIAN_PACKAGES=(libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev pkg-config chromium)

missing=()
for package in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "toolchain: installing ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "toolchain: needs root to install Debian packages: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p "$CACHE"
NODE_HOME="$CACHE/node-$NODE_VERSION"
if [[ ! -x "$NODE_HOME/node_modules/node/bin/node" ]]; then
  echo "toolchain: installing Node $NODE_VERSION"
  rm -rf "$NODE_HOME"
  # The npm package `node` ships the binary; its install script puts it in place.
  npm install --silent --no-audit --no-fund --prefix "$NODE_HOME" --foreground-scripts "node@$NODE_VERSION"
fi
export PATH="$NODE_HOME/node_modules/node/bin:$NODE_HOME/node_modules/.bin:$PATH"

CODE_SERVER_HOME="$CACHE/code-server-$CODE_SERVER_VERSION"
if [[ ! -f "$CODE_SERVER_HOME/.installed" ]]; then
  echo "toolchain: installing code-server $CODE_SERVER_VERSION"
  rm -rf "$CODE_SERVER_HOME"
  npm install --silent --no-audit --no-fund --prefix "$CODE_SERVER_HOME" "code-server@$CODE_SERVER_VERSION"
  # npm 11 skips install scripts; code-server's builds VS Code's native modules for this Node.
  (cd "$CODE_SERVER_HOME/node_modules/code-server" &&
    npm_config_user_agent="npm/$(npm --version) node/v$NODE_VERSION linux x64" sh postinstall.sh >/dev/null)
  touch "$CODE_SERVER_HOME/.installed"
fi
