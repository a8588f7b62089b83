#!/usr/bin/env bash
# Builds and runs the jitter-buffer benchmark: PeerVoice's JitterBuffer against speexdsp's.
# Needs libspeexdsp-dev (Debian) and the Swift toolchain; speexdsp is linked into this benchmark
# only, never into PeerVoice. Run from anywhere; extra arguments go to the benchmark
# (e.g. --frame-ms 10, --seconds 60, --late-fraction 0.01, --json '' to skip the JSON).
# Writes bench/results/jitter.json.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
out=.build/bench-jitter
mkdir -p "$out" bench/results
SWIFTC="${SWIFTC:-swiftc}"
CC="${CC:-cc}"
"$CC" -O2 -Wall -c bench/jitter/speex_sim.c -I bench/jitter $(pkg-config --cflags speexdsp) -o "$out/speex_sim.o"
"$SWIFTC" -O -swift-version 6 -module-name JitterBench \
    -I bench/jitter/CSpeexSim \
    bench/jitter/main.swift Tests/SeededRandom/SplitMix64.swift Sources/PeerVoiceCore/Voice/JitterBuffer.swift \
    "$out/speex_sim.o" $(pkg-config --libs speexdsp) \
    -o "$out/bench-jitter"
"$out/bench-jitter" --json bench/results/jitter.json "$@"
