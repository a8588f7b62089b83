#!/usr/bin/env bash
# Usage: scripts/deps.sh PKG...
# Installs those Debian packages among PKG that are not installed yet. Runs `apt-get update` first,
# and only when something is missing; uses sudo when not root. Non-interactive (works with no stdin).
set -euo pipefail

declare -A seen=()
missing=()
for pkg in "$@"; do
    [[ -n "${seen[$pkg]:-}" ]] && continue
    seen[$pkg]=1
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    case "$status" in
        *"ok installed"*) ;;
        *) missing+=("$pkg") ;;
    esac
done

if [[ ${#missing[@]} -eq 0 ]]; then
    echo "deps: all ${#seen[@]} Debian packages are installed"
    exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
else
    echo "deps: missing ${missing[*]}; run as root or install sudo" >&2
    exit 1
fi

echo "deps: installing ${missing[*]}"
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q)
"${apt[@]}" update
"${apt[@]}" install -y --no-install-recommends "${missing[@]}" </dev/null
