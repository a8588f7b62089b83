#!/usr/bin/env bash
# Builds the previous release's peervoiced, for the old <-> new tests (ServiceTests.OldReleaseTests,
# make test-old-release): the commit recorded in tests/old-release/COMMIT (the last commit of the
# previous protocol version, see docs/PROTOCOL.md §3.1), exported with `git archive` and built
# (peervoiced only, debug) into .build/old-release/COMMIT/, once: a second run finds the binary
# and builds nothing.
#
# usage: tests/old-release/build.sh        prints the binary's path on the last line
#
# Exit status: 0 built or found; 3 when the commit is not in this clone (a shallow checkout, or
# no .git): the old <-> new tests are then NOT RUN, and this says so loudly; 1 when the build failed.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
cd "$ROOT"
COMMIT=$(sed -n 's/^commit //p' tests/old-release/COMMIT)
SWIFT=${SWIFT:-swift}
DIR=.build/old-release/$COMMIT
BINARY=$DIR/peervoiced

if [[ -x $BINARY ]]; then
    echo "old release: $COMMIT already built"
    echo "$ROOT/$BINARY"
    exit 0
fi

not_run() {
    cat >&2 <<BANNER
################################################################################################
# OLD <-> NEW TESTS NOT RUN: $*
# The previous release (commit $COMMIT, tests/old-release/COMMIT) cannot be built here, so
# ServiceTests.OldReleaseTests skips: nothing about talking to it is checked. In a shallow
# clone, fetch it first:  git fetch --depth=1 origin $COMMIT   (or git fetch --unshallow).
################################################################################################
BANNER
    exit 3
}

command -v git >/dev/null 2>&1 || not_run "git is not installed"
git rev-parse --git-dir >/dev/null 2>&1 || not_run "$ROOT is not a git clone"
if ! git cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
    # A shallow CI checkout may reach it from its remote.
    if git remote get-url origin >/dev/null 2>&1; then
        echo "old release: fetching $COMMIT from origin" >&2
        git fetch -q --depth=1 origin "$COMMIT" 2>&1 | sed 's/^/old release: /' >&2 || true
    fi
    git cat-file -e "$COMMIT^{commit}" 2>/dev/null || not_run "commit $COMMIT is not in this clone"
fi

started=$SECONDS
rm -rf "$DIR/src"
mkdir -p "$DIR/src"
git archive "$COMMIT" | tar -x -C "$DIR/src"
echo "old release: building peervoiced of $COMMIT ($(git log -1 --format=%cs "$COMMIT"))" >&2
if ! "$SWIFT" build --package-path "$DIR/src" --scratch-path "$DIR/scratch" --product peervoiced >"$DIR/build.log" 2>&1; then
    grep -v "prohibited flag" "$DIR/build.log" | tail -30 >&2
    echo "old release: the build of $COMMIT failed (the whole log: $DIR/build.log)" >&2
    exit 1
fi
built="$("$SWIFT" build --package-path "$DIR/src" --scratch-path "$DIR/scratch" --product peervoiced --show-bin-path)/peervoiced"
[[ -x $built ]] || { echo "old release: the build of $COMMIT made no peervoiced" >&2; exit 1; }
cp "$built" "$BINARY.new"
mv "$BINARY.new" "$BINARY"
# The sources and objects are not needed any more (about 400 MB).
rm -rf "$DIR/src" "$DIR/scratch"
echo "old release: built in $((SECONDS - started)) s" >&2
echo "$ROOT/$BINARY"
