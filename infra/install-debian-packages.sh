#!/usr/bin/env bash
# Install the given Debian packages when apt-get exists and any of them is missing.
# Runs `apt-get update` once (only when something must be installed), non-interactively.
# Usage: infra/install-debian-packages.sh kcat [zookeeper prometheus ...]
set -euo pipefail

missing=()
for package in "$@"; do
    status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
    if [[ "$status" != "install ok installed" ]]; then
        missing+=("$package")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "warning: no apt-get here; install these yourself: ${missing[*]}" >&2
    exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo=(sudo)
    else
        echo "error: need root (or sudo) to install: ${missing[*]}" >&2
        exit 1
    fi
fi

echo "installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
