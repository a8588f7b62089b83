#!/usr/bin/env bash
# proto/Mumble.proto -> Sources/MumbleProtoC/ with protoc-c (Debian protobuf-c-compiler).
#
#   scripts/proto.sh generate   writes Mumble.pb-c.c and include/Mumble.pb-c.h (`make proto`)
#   scripts/proto.sh check      fails when the committed files differ from a fresh generation (`make test`)
#
# SwiftPM cannot run protoc-c, so the generated C is committed; `check` keeps it from drifting.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
protoc-c --proto_path=proto --c_out="$out" Mumble.proto
target=Sources/MumbleProtoC
case ${1:-} in
    generate)
        cp "$out/Mumble.pb-c.c" "$target/Mumble.pb-c.c"
        cp "$out/Mumble.pb-c.h" "$target/include/Mumble.pb-c.h"
        echo "proto: $target/ regenerated from proto/Mumble.proto ($(protoc-c --version | head -1))" ;;
    check)
        if ! diff -u "$target/Mumble.pb-c.c" "$out/Mumble.pb-c.c" || ! diff -u "$target/include/Mumble.pb-c.h" "$out/Mumble.pb-c.h"; then
            echo "proto: $target/ is not what proto/Mumble.proto generates: run make proto and commit it" >&2
            exit 1
        fi
        echo "proto: $target/ matches proto/Mumble.proto" ;;
    *)
        echo "usage: scripts/proto.sh generate|check" >&2
        exit 2 ;;
esac
