#!/usr/bin/env bash
# Builds and runs the mixer benchmark: VoiceMixer's cost per 20 ms frame for 1–8 voices, next to a
# plain clamped sum (the baseline) in the same run. Medians of 7 runs of 5,000 frames. Asserts
# nothing. Run from anywhere.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
out=.build/bench-mixer
mkdir -p "$out"
core=Sources/PeerVoiceCore
"${SWIFTC:-swiftc}" -O -swift-version 6 -parse-as-library -module-name MixerBench \
    bench/mixer/main.swift "$core/Voice/VoiceMixer.swift" "$core/Voice/Decibels.swift" \
    "$core/Voice/VoiceCodec.swift" "$core/ServiceError.swift" \
    -o "$out/bench-mixer"
"$out/bench-mixer"
