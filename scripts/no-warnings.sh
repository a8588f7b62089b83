#!/usr/bin/env bash
# Passes a build's output through and fails if it holds a compiler warning. SwiftPM's
# "prohibited flag(s)" notices (pkg-config's -pthread / -D_REENTRANT for GLib and PipeWire) are
# not the code's and do not count. Usage: swift build 2>&1 | scripts/no-warnings.sh
set -euo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
tee "$log"
warnings=$(grep -E '(^|: )warning:' "$log" | grep -v 'warning: prohibited flag' | sort -u || true)
if [[ -n "$warnings" ]]; then
    printf '\nno-warnings: the build printed compiler warnings; fix them:\n%s\n' "$warnings" >&2
    exit 1
fi
