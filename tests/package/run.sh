#!/usr/bin/env bash
# The Debian package as a person gets it (issue 33): build the .debs, check that no program links
# the Swift toolchain, install them with apt-get, let an ordinary user's session start the service
# by D-Bus activation and run `peervoicectl status`, upgrade to a rebuilt package with a higher
# version (the user's state directory kept: same peer id), then purge and check that no file of
# the package is left. Runs as root (apt-get, a user of its own); cleans up even when it fails.
#
# Usage: tests/package/run.sh CONFIGURATION   (release or debug: what `make deb` builds)
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.."
configuration=${1:-release}
out=.build/debs
user=pvpkg$$
step() { printf '\n== package test: %s\n' "$*"; }
fail() { printf 'package test FAILED: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "needs root (apt-get install, a user of its own)"
# Another PeerVoice installed on this machine would make the checks below meaningless.
for existing in peervoice peervoice-app; do
    if dpkg-query -W -f='${Status}' "$existing" 2>/dev/null | grep -q 'ok installed'; then
        fail "$existing is already installed here; remove it first (apt-get purge $existing)"
    fi
done

cleanup() {
    pkill -KILL -u "$user" 2>/dev/null || true
    userdel -r "$user" 2>/dev/null || true
    DEBIAN_FRONTEND=noninteractive apt-get -q purge -y peervoice peervoice-app >/dev/null 2>&1 || true
}
trap cleanup EXIT

toolchain=$(dirname "$(dirname "$(readlink -f "$(command -v swift)")")")
build() {
    local version=$1 started=$SECONDS
    make --no-print-directory deb DEB_CONFIGURATION="$configuration" DEB_VERSION="$version" >"$out-$version.log" 2>&1 ||
        { tail -n 40 "$out-$version.log"; fail "make deb DEB_VERSION=$version"; }
    echo "built $version ($configuration) in $((SECONDS - started)) s"
}

step "build 0.1.0 ($configuration)"
rm -rf "$out"
build 0.1.0
ls -l "$out"/*.deb

step "no program links anything under the toolchain ($toolchain)"
for deb in "$out"/peervoice_0.1.0_*.deb "$out"/peervoice-app_0.1.0_*.deb; do
    unpacked=$(mktemp -d)
    dpkg-deb -x "$deb" "$unpacked"
    for program in "$unpacked"/usr/bin/*; do
        links=$(ldd "$program")
        runpath=$(readelf -d "$program" | grep -E 'R(UN)?PATH' || true)
        if grep -qF "$toolchain" <<<"$links$runpath" || grep -q 'not found' <<<"$links"; then
            echo "$links"; echo "$runpath"; fail "$(basename "$program") links the toolchain or a missing library"
        fi
        echo "$(basename "$program"): $(grep -c '=>' <<<"$links") libraries, none under $toolchain"
    done
    rm -rf "$unpacked"
done
dpkg-deb -f "$out"/peervoice_0.1.0_*.deb Depends

step "lintian"
lintian --fail-on error,warning --display-info "$out"/*.changes || fail "lintian reports errors"

step "apt-get install"
DEBIAN_FRONTEND=noninteractive apt-get -q install -y "./$(ls "$out"/peervoice_0.1.0_*.deb)" "./$(ls "$out"/peervoice-app_0.1.0_*.deb)" </dev/null

useradd --create-home --shell /bin/sh "$user"
# An ordinary user's session: a session bus that reads the installed activation files, nothing of
# the build tree or the toolchain on PATH.
as_user() {
    runuser -u "$user" -- env -i HOME="/home/$user" PATH=/usr/bin:/bin LANG=C.UTF-8 "$@"
}
# `peervoicectl status` in a new session of the user's; what it printed goes to FILE (a file, not
# a pipe: what the session's bus started, such as a desktop portal, may outlive it for a moment).
session_status() {
    local file=$1
    as_user dbus-run-session -- sh -c '
        peervoicectl status
        pid=$(busctl --user call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
              GetConnectionUnixProcessID s org.example.PeerVoice | cut -d" " -f2)
        echo "Program: $(readlink /proc/$pid/exe)"' >"$file" 2>&1
}

step "bus activation in $user's session"
session_status "$out/status-1.txt" || { cat "$out/status-1.txt"; fail "peervoicectl status as $user"; }
first=$(grep -E '^[A-Za-z]+: ' "$out/status-1.txt")
echo "$first"
grep -q '^Program: /usr/bin/peervoiced$' <<<"$first" || fail "the service that answered is not the installed /usr/bin/peervoiced"
id_before=$(sed -n 's/^Id: *//p' <<<"$first")
[[ $id_before == pv:* ]] || fail "no peer id in the status"

step "upgrade to 0.1.0+rebuild1"
build 0.1.0+rebuild1
DEBIAN_FRONTEND=noninteractive apt-get -q install -y "./$(ls "$out"/peervoice_0.1.0+rebuild1_*.deb)" \
    "./$(ls "$out"/peervoice-app_0.1.0+rebuild1_*.deb)" </dev/null
[[ $(dpkg-query -W -f='${Version}' peervoice) == 0.1.0+rebuild1 ]] || fail "the upgrade did not install 0.1.0+rebuild1"
session_status "$out/status-2.txt" || { cat "$out/status-2.txt"; fail "peervoicectl status after the upgrade"; }
second=$(grep -E '^[A-Za-z]+: ' "$out/status-2.txt")
id_after=$(sed -n 's/^Id: *//p' <<<"$second")
[[ $id_after == "$id_before" ]] || fail "the state directory was not kept: id $id_before became $id_after"
echo "same peer id after the upgrade: $id_after"

step "apt-get purge"
files=$(dpkg -L peervoice peervoice-app | sort -u)
DEBIAN_FRONTEND=noninteractive apt-get -q purge -y peervoice peervoice-app </dev/null
left=()
while read -r path; do
    [[ -n $path && -e $path && ! -d $path ]] && left+=("$path")
done <<<"$files"
((${#left[@]} == 0)) || fail "purge left files of the package: ${left[*]}"
echo "purged: none of the package's $(wc -l <<<"$files") paths is left"
echo "package test PASSED"
