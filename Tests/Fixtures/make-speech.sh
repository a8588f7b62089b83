#!/usr/bin/env bash
# Regenerates Tests/Fixtures/speech.wav, the speech that VoiceTests and `make bench-voice` play into
# the virtual microphone: three Harvard sentences (IEEE 1969, list 1) spoken by eSpeak NG, 16 kHz
# mono 16-bit, about 7.4 s and 236 KB. Deterministic: no dither (-D), so the same espeak-ng (1.51,
# Debian 12) and sox (14.4.2) give the same bytes.
#   Needs: espeak-ng sox (Debian packages). Usage: Tests/Fixtures/make-speech.sh [OUT.wav]
set -euo pipefail
out=${1:-"$(dirname "$0")/speech.wav"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
espeak-ng -v en-us -s 165 -w "$tmp/raw.wav" \
    "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background. It's easy to tell the depth of a well."
sox -D "$tmp/raw.wav" -r 16000 -b 16 -c 1 "$out" rate -v
echo "wrote $out ($(stat -c %s "$out") bytes)"
