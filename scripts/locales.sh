#!/usr/bin/env bash
# Usage: scripts/locales.sh LOCALE...   e.g. de_DE.UTF-8
# Generates the glibc locales among LOCALE that are missing (Debian: enables them in
# /etc/locale.gen and runs locale-gen, from the `locales` package); uses sudo when not root.
set -euo pipefail

missing=()
for want in "$@"; do
    # `locale -a` lists de_DE.UTF-8 as de_DE.utf8.
    normal=$(echo "$want" | sed 's/\.UTF-8$/.utf8/I')
    locale -a 2>/dev/null | grep -qixF "$normal" || missing+=("$want")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=()
[[ $(id -u) -eq 0 ]] || sudo=(sudo)
for want in "${missing[@]}"; do
    "${sudo[@]}" sed -i "s/^# *\(${want//./\\.} \)/\1/" /etc/locale.gen
    grep -q "^${want//./\\.} " /etc/locale.gen || echo "$want UTF-8" | "${sudo[@]}" tee -a /etc/locale.gen >/dev/null
done
echo "locales: generating ${missing[*]}"
"${sudo[@]}" locale-gen
