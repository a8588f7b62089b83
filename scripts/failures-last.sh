#!/usr/bin/env bash
# Passes a test run's output through and repeats, at its end, the lines that say what failed
# (an assertion's or a thrown error's "error:" line, each failed test case): a CI log that keeps
# only its tail still shows them. Usage: swift test 2>&1 | scripts/failures-last.sh
set -euo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
tee "$log"
if grep -qE ': error: |^Test Case .* failed \(' "$log"; then
    printf '\nwhat failed, again:\n'
    grep -E ': error: |^Test Case .* failed \(' "$log"
fi
