#!/usr/bin/env bash
# Builds and runs the libFuzzer targets of fuzz/ (see fuzz/README.md). Plain swiftc, no SwiftPM.
#
#   fuzz/run.sh build [TARGET...]             build (default: every target)
#   fuzz/run.sh TARGET SECONDS [ARGS...]      build, then fuzz TARGET for SECONDS (ARGS go to libFuzzer)
#   fuzz/run.sh all SECONDS [ARGS...]         the same for every target in turn
#   fuzz/run.sh repro TARGET FILE...          run TARGET once on each FILE (a crash reproducer)
#   fuzz/run.sh coverage [TARGET...]          line/region coverage (llvm-cov) of each target's sources by its corpus
#   fuzz/run.sh keep [TARGET...]              merge what the runs found into fuzz/corpus/TARGET (only the
#                                             inputs that add coverage: libFuzzer's -merge=1)
#   fuzz/run.sh list                          the target names
#
# Environment: SWIFTC (default: swiftc on PATH), FUZZ_OPT (-O; -Onone if -O misbehaves),
# FUZZ_RSS_MB (2048), FUZZ_TIMEOUT (per-input seconds, 10), FUZZ_NICE (10), FUZZ_JOBS (1: libFuzzer
# workers per target), FUZZ_PARALLEL (`all`: targets built and run at once, default the cores),
# FUZZ_DIR (.build/fuzz); read by the targets: FUZZ_TRACE=1 (print each step),
# FUZZ_CRYPTO=libsodium|stand-in (handshake, dial-proof: every input on one kind of primitives).
#
# Outputs under FUZZ_DIR: modules/ and lib/ (PeerVoiceCore, Sodium, MumbleProtobuf and the generated
# MumbleProtoC, instrumented; SeededRandom and SimulationCrypto, the crypto stand-in, not), bin/TARGET,
# corpus-TARGET/ (the committed seeds of fuzz/corpus/TARGET plus whatever the runs found),
# artifacts-TARGET/ (crash-*, leak-*, timeout-*, oom-* reproducers), logs/TARGET.log, coverage/
# (the llvm-cov build and its profiles).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

TARGETS=(frame-decoder handshake jitter-buffer lan-advertisement call-frames channel-frames dial-proof mumble-control transfer-messages mumble-udp)
SWIFTC=${SWIFTC:-swiftc}
FUZZ_DIR=${FUZZ_DIR:-.build/fuzz}
FUZZ_OPT=${FUZZ_OPT:--O}
FUZZ_RSS_MB=${FUZZ_RSS_MB:-2048}
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-10}
FUZZ_NICE=${FUZZ_NICE:-10}
FUZZ_JOBS=${FUZZ_JOBS:-1}
FUZZ_PARALLEL=${FUZZ_PARALLEL:-$(nproc)}

# libFuzzer (coverage, main) and AddressSanitizer everywhere; assertions kept despite -O; Swift 6
# language mode, as Package.swift builds the modules.
SWIFT_FLAGS=(-sanitize=fuzzer,address "$FUZZ_OPT" -g -assert-config Debug -swift-version 6 -parse-as-library)
# What is linked in but not under test (the crypto stand-in), as libsodium is: uninstrumented.
PLAIN_FLAGS=(-O -g -swift-version 6 -parse-as-library)
# The C protoc-c generated (Sources/MumbleProtoC), instrumented the same way; libprotobuf-c itself
# is Debian's, linked as it is (as libsodium is).
C_FLAGS=(-fsanitize=fuzzer-no-link,address -O1 -g)
CLANG=$(dirname "$(command -v "$SWIFTC")")/clang
# Where the libraries and binaries go (`coverage` builds a second, source-coverage variant).
BUILD_DIR=$FUZZ_DIR

# Without this, the Swift runtime's crash handler (swift-backtrace) takes over from libFuzzer's and
# can linger after the fuzzer has exited, holding its output open.
export SWIFT_BACKTRACE=enable=no
# Leaks are reported (libFuzzer's -detect_leaks=1 default); a sanitizer error aborts the input.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:symbolize=1:allocator_may_return_null=1}

die() { echo "fuzz/run.sh: $*" >&2; exit 2; }

is_target() {
    local t
    for t in "${TARGETS[@]}"; do [[ $t == "$1" ]] && return 0; done
    return 1
}

# Runs swiftc quietly: ld.gold warns about every ASan helper symbol ("Cannot export local symbol").
swiftc_quiet() {
    local log
    log=$(mktemp)
    if ! nice -n "$FUZZ_NICE" "$SWIFTC" "$@" >"$log" 2>&1; then
        grep -v "Cannot export local symbol" "$log" >&2 || true
        rm -f "$log"
        return 1
    fi
    grep -v "Cannot export local symbol" "$log" >&2 || true
    rm -f "$log"
}

# True when $1 is missing or older than any of the remaining files.
stale() {
    local out=$1 f
    shift
    [[ -e $out ]] || return 0
    for f in "$@"; do [[ $f -nt $out ]] && return 0; done
    return 1
}

build_libs() {
    mkdir -p "$BUILD_DIR/modules" "$BUILD_DIR/lib"
    local core=() sodium=() protobuf=()
    mapfile -t core < <(find Sources/PeerVoiceCore -name '*.swift' | LC_ALL=C sort)
    mapfile -t sodium < <(find Sources/Sodium -name '*.swift' | LC_ALL=C sort)
    mapfile -t protobuf < <(find Sources/MumbleProtobuf -name '*.swift' | LC_ALL=C sort)
    # Rebuild everything when the compiler or its flags change.
    local stamp="$BUILD_DIR/flags"
    local flags
    flags="$("$SWIFTC" --version 2>&1 | head -1) ${SWIFT_FLAGS[*]} ${C_FLAGS[*]}"
    if [[ ! -f $stamp || $(cat "$stamp") != "$flags" ]]; then
        rm -f "$BUILD_DIR/lib/"*.a "$BUILD_DIR/bin/"*
        printf '%s' "$flags" >"$stamp"
    fi
    if stale "$BUILD_DIR/lib/libPeerVoiceCore.a" "${core[@]}"; then
        echo "fuzz: building PeerVoiceCore (${#core[@]} files)" >&2
        swiftc_quiet "${SWIFT_FLAGS[@]}" -module-name PeerVoiceCore -wmo \
            -emit-module -emit-module-path "$BUILD_DIR/modules/PeerVoiceCore.swiftmodule" \
            -emit-library -static -o "$BUILD_DIR/lib/libPeerVoiceCore.a" "${core[@]}"
    fi
    # The crypto targets' stand-in for libsodium (the simulation's DeterministicCrypto, drawing from
    # SplitMix64), left uninstrumented as libsodium is: it is not under test, and its coverage and
    # comparisons would only slow the fuzzer and add features that say nothing.
    if stale "$BUILD_DIR/lib/libSimulationCrypto.a" Tests/SeededRandom/*.swift Tests/Simulation/DeterministicCrypto.swift \
        "$BUILD_DIR/lib/libPeerVoiceCore.a"; then
        echo "fuzz: building SeededRandom and SimulationCrypto (uninstrumented)" >&2
        swiftc_quiet "${PLAIN_FLAGS[@]}" -module-name SeededRandom -wmo \
            -emit-module -emit-module-path "$BUILD_DIR/modules/SeededRandom.swiftmodule" \
            -emit-library -static -o "$BUILD_DIR/lib/libSeededRandom.a" Tests/SeededRandom/*.swift
        swiftc_quiet "${PLAIN_FLAGS[@]}" -module-name SimulationCrypto -wmo -I "$BUILD_DIR/modules" \
            -emit-module -emit-module-path "$BUILD_DIR/modules/SimulationCrypto.swiftmodule" \
            -emit-library -static -o "$BUILD_DIR/lib/libSimulationCrypto.a" Tests/Simulation/DeterministicCrypto.swift
    fi
    if stale "$BUILD_DIR/lib/libSodium.a" "${sodium[@]}" "$BUILD_DIR/lib/libPeerVoiceCore.a"; then
        echo "fuzz: building Sodium (libsodium $(pkg-config --modversion libsodium 2>/dev/null || echo '?'))" >&2
        swiftc_quiet "${SWIFT_FLAGS[@]}" -module-name Sodium -wmo -I "$BUILD_DIR/modules" -I Sources/CSodium \
            -emit-module -emit-module-path "$BUILD_DIR/modules/Sodium.swiftmodule" \
            -emit-library -static -o "$BUILD_DIR/lib/libSodium.a" "${sodium[@]}"
    fi
    local generated=(Sources/MumbleProtoC/Mumble.pb-c.c Sources/MumbleProtoC/include/Mumble.pb-c.h)
    if stale "$BUILD_DIR/lib/libMumbleProtoC.a" "${generated[@]}"; then
        echo "fuzz: building MumbleProtoC (protobuf-c $(pkg-config --modversion libprotobuf-c 2>/dev/null || echo '?'))" >&2
        nice -n "$FUZZ_NICE" "$CLANG" "${C_FLAGS[@]}" -I Sources/MumbleProtoC/include -c "${generated[0]}" -o "$BUILD_DIR/lib/Mumble.pb-c.o"
        rm -f "$BUILD_DIR/lib/libMumbleProtoC.a"
        ar rcs "$BUILD_DIR/lib/libMumbleProtoC.a" "$BUILD_DIR/lib/Mumble.pb-c.o"
    fi
    if stale "$BUILD_DIR/lib/libMumbleProtobuf.a" "${protobuf[@]}" "$BUILD_DIR/lib/libPeerVoiceCore.a" "$BUILD_DIR/lib/libMumbleProtoC.a"; then
        echo "fuzz: building MumbleProtobuf" >&2
        swiftc_quiet "${SWIFT_FLAGS[@]}" -module-name MumbleProtobuf -wmo -I "$BUILD_DIR/modules" \
            -I Sources/CProtobufC -I Sources/MumbleProtoC/include \
            -emit-module -emit-module-path "$BUILD_DIR/modules/MumbleProtobuf.swiftmodule" \
            -emit-library -static -o "$BUILD_DIR/lib/libMumbleProtobuf.a" "${protobuf[@]}"
    fi
}

build_target() {
    local target=$1
    is_target "$target" || die "unknown target '$target' (targets: ${TARGETS[*]})"
    build_libs
    mkdir -p "$BUILD_DIR/bin"
    local out="$BUILD_DIR/bin/$target"
    local libs=(-L "$BUILD_DIR/lib" -lPeerVoiceCore) sources=("fuzz/$target.swift" fuzz/support/*.swift) stand_in=()
    # Only the handshake and dial-proof targets need cryptography: libsodium, and the simulation's
    # stand-in for most inputs (fuzz/crypto/CryptoChoice.swift).
    if [[ $target == handshake || $target == dial-proof ]]; then
        libs=(-I Sources/CSodium -L "$BUILD_DIR/lib" -lSodium -lSimulationCrypto -lSeededRandom -lPeerVoiceCore -lsodium -lFoundation)
        sources+=(fuzz/crypto/*.swift)
        stand_in=("$BUILD_DIR/lib/libSimulationCrypto.a")
    fi
    # mumble-control decodes through the room's codec: protobuf-c and the generated C.
    if [[ $target == mumble-control ]]; then
        libs=(-I Sources/CProtobufC -I Sources/MumbleProtoC/include -L "$BUILD_DIR/lib" -lMumbleProtobuf -lMumbleProtoC -lPeerVoiceCore -lprotobuf-c)
    fi
    if stale "$out" "${sources[@]}" "$BUILD_DIR/lib/libPeerVoiceCore.a" "$BUILD_DIR/lib/libSodium.a" "${stand_in[@]}" \
        "$BUILD_DIR/lib/libMumbleProtobuf.a"; then
        echo "fuzz: building $target" >&2
        swiftc_quiet "${SWIFT_FLAGS[@]}" -module-name "FuzzTarget" -I "$BUILD_DIR/modules" \
            "${sources[@]}" "${libs[@]}" -o "$out"
    fi
}

run_target() {
    local target=$1 seconds=$2
    shift 2
    [[ $seconds =~ ^[0-9]+$ ]] || die "SECONDS must be a whole number, not '$seconds'"
    build_target "$target"
    local corpus="$FUZZ_DIR/corpus-$target" artifacts="$FUZZ_DIR/artifacts-$target/" log="$FUZZ_DIR/logs/$target.log"
    mkdir -p "$corpus" "$artifacts" "$FUZZ_DIR/logs"
    # The committed seeds stay small: the run grows a copy.
    if [[ -d fuzz/corpus/$target ]]; then cp -n fuzz/corpus/"$target"/* "$corpus"/ 2>/dev/null || true; fi
    local dict=()
    [[ -f fuzz/$target.dict ]] && dict=(-dict="fuzz/$target.dict")
    local max_len=4096
    [[ $target == handshake ]] && max_len=8192
    local jobs=()
    [[ $FUZZ_JOBS -gt 1 ]] && jobs=(-fork="$FUZZ_JOBS" -ignore_crashes=0)
    echo "fuzz: $target for ${seconds}s (log: $log)" >&2
    local status=0 started=$SECONDS
    # No allocation stacks while fuzzing: unwinding and storing one per allocation was a fifth of the
    # handshake target's time. A report still shows the bad access's stack; `repro` shows where the
    # memory came from. (Options given in ASAN_OPTIONS come later and win.)
    ASAN_OPTIONS="malloc_context_size=0:$ASAN_OPTIONS" nice -n "$FUZZ_NICE" "$BUILD_DIR/bin/$target" \
        -max_total_time="$seconds" -rss_limit_mb="$FUZZ_RSS_MB" -timeout="$FUZZ_TIMEOUT" \
        -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$artifacts" "${dict[@]}" "${jobs[@]}" \
        "$@" "$corpus" >"$log" 2>&1 || status=$?
    summarize "$target" "$log" "$status" "$((SECONDS - started))"
    return "$status"
}

# One line per run, then the crash report if there is one.
summarize() {
    local target=$1 log=$2 status=$3 seconds=$4
    local execs rate cov ft corp rss calls
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
    # What the target counted (fuzz/support/FuzzInput.swift, Call): "N Name" each.
    calls=$(sed -n 's/^stat::calls_\([^:]*\): *\(.*\)/\2 \1/p' "$log" | paste -sd, - | sed 's/,/, /g')
    cov=$( (grep -o 'cov: [0-9]*' "$log" || true) | tail -1 | cut -d' ' -f2)
    ft=$( (grep -o 'ft: [0-9]*' "$log" || true) | tail -1 | cut -d' ' -f2)
    corp=$( (grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" || true) | tail -1 | cut -d' ' -f2)
    local result=ok
    if [[ $status -ne 0 ]]; then
        result="FAILED (exit $status)"
        grep -E '^(==[0-9]+==ERROR|SUMMARY|.*Fatal error|.*invariant violated|artifact_prefix|Test unit written|Base64)' "$log" >&2 || tail -30 "$log" >&2
        local unit
        unit=$(sed -n 's/.*Test unit written to //p' "$log" | tail -1)
        [[ -n $unit ]] && echo "reproduce: fuzz/run.sh repro $target $unit (FUZZ_TRACE=1 prints the steps)" >&2
    fi
    echo "fuzz $target: ${execs:-?} executions in ${seconds}s (${rate:-?} exec/s)${calls:+ making $calls calls}, cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}, peak RSS ${rss:-?} MB: $result"
}

# The sources each target is about (for `coverage`).
sources_of() {
    case $1 in
        frame-decoder) ls Sources/PeerVoiceCore/Wire/*.swift ;;
        handshake) ls Sources/PeerVoiceCore/Security/{CryptoPrimitives,Handshake,HandshakeError,HandshakeResult,SealedRecord,StaticIdentity,SymmetricState,VoiceKeys}.swift Sources/Sodium/*.swift ;;
        jitter-buffer) echo Sources/PeerVoiceCore/Voice/JitterBuffer.swift ;;
        lan-advertisement) ls Sources/PeerVoiceCore/LAN/*.swift ;;
        channel-frames) ls Sources/PeerVoiceCore/Channels/*.swift ;;
        dial-proof) ls Sources/PeerVoiceCore/Security/{DialProof,DialGate,Handshake,HandshakeError}.swift ;;
        mumble-control) ls Sources/PeerVoiceCore/Rooms/*.swift Sources/MumbleProtobuf/*.swift Sources/MumbleProtoC/Mumble.pb-c.c ;;
        transfer-messages) ls Sources/PeerVoiceCore/Transfers/*.swift ;;
        mumble-udp) ls Sources/PeerVoiceCore/Rooms/{MumbleCrypt,MumbleVoicePacket}.swift ;;
    esac
}

# Source-based coverage (llvm-cov) of the target's sources by its corpus: a separate -Onone build
# with -profile-generate -profile-coverage-mapping runs the corpus once (-runs=0), no fuzzing.
coverage() {
    local target=$1
    BUILD_DIR=$FUZZ_DIR/coverage
    SWIFT_FLAGS=(-sanitize=fuzzer -profile-generate -profile-coverage-mapping -Onone -g -swift-version 6 -parse-as-library)
    C_FLAGS=(-fsanitize=fuzzer-no-link -fprofile-instr-generate -fcoverage-mapping -O0 -g)
    build_target "$target"
    local corpus="$FUZZ_DIR/corpus-$target" profiles="$BUILD_DIR/profiles"
    [[ -d $corpus ]] || corpus=fuzz/corpus/$target
    mkdir -p "$profiles"
    rm -f "$profiles/$target".*
    local tools
    tools=$(dirname "$(command -v "$SWIFTC")")
    LLVM_PROFILE_FILE="$profiles/$target.%p.profraw" nice -n "$FUZZ_NICE" "$BUILD_DIR/bin/$target" -runs=0 \
        -rss_limit_mb="$FUZZ_RSS_MB" "$corpus" >"$profiles/$target.log" 2>&1 || { tail -20 "$profiles/$target.log" >&2; return 1; }
    "$tools/llvm-profdata" merge -sparse "$profiles/$target".*.profraw -o "$profiles/$target.profdata"
    local sources=()
    mapfile -t sources < <(sources_of "$target")
    echo "$target: corpus $(find "$corpus" -type f | wc -l) inputs ($corpus)"
    "$tools/llvm-cov" report "$BUILD_DIR/bin/$target" -instr-profile="$profiles/$target.profdata" "${sources[@]}"
    echo "(line by line: $tools/llvm-cov show $BUILD_DIR/bin/$target -instr-profile=$profiles/$target.profdata SOURCE)"
}

# Keeps the inputs of the grown corpus that reach coverage the committed seeds do not, so the next
# run, on any machine, starts from where this one ended.
keep() {
    local target=$1
    build_target "$target"
    local corpus="$FUZZ_DIR/corpus-$target"
    [[ -d $corpus ]] || { echo "fuzz: no corpus of $target to keep (run it first)" >&2; return 0; }
    mkdir -p "fuzz/corpus/$target"
    local before
    before=$(find "fuzz/corpus/$target" -type f | wc -l)
    nice -n "$FUZZ_NICE" "$BUILD_DIR/bin/$target" -merge=1 -rss_limit_mb="$FUZZ_RSS_MB" -timeout="$FUZZ_TIMEOUT" \
        "fuzz/corpus/$target" "$corpus" >"$FUZZ_DIR/logs/$target-keep.log" 2>&1 || { tail -20 "$FUZZ_DIR/logs/$target-keep.log" >&2; return 1; }
    echo "fuzz $target: fuzz/corpus/$target has $(find "fuzz/corpus/$target" -type f | wc -l) inputs (was $before)"
}

# Runs `$1 TARGET ARGS...` for each of TARGETS, FUZZ_PARALLEL at a time (each target is one
# single-threaded swiftc or fuzzer); each one's output is printed whole, in TARGETS order; fails
# when any failed.
each_target() {
    local step=$1 outputs target i failed=0
    shift
    outputs=$(mktemp -d)
    local -a pids=()
    for i in "${!TARGETS[@]}"; do
        while [[ $(jobs -rp | wc -l) -ge $FUZZ_PARALLEL ]]; do wait -n || true; done
        target=${TARGETS[$i]}
        (
            status=0
            "$step" "$target" "$@" >"$outputs/$i" 2>&1 || status=$?
            echo "$status" >"$outputs/$i.status"
        ) &
        pids[i]=$!
    done
    for i in "${!TARGETS[@]}"; do
        wait "${pids[i]}" || true
        cat "$outputs/$i"
        [[ $(cat "$outputs/$i.status") -eq 0 ]] || failed=1
    done
    rm -rf "$outputs"
    return "$failed"
}

# Everything is parsed before anything runs (the last line), so editing this file while a long run
# is under way does not derail it.
main() {
    [[ $# -ge 1 ]] || die "usage: fuzz/run.sh build [TARGET...] | TARGET SECONDS [ARGS...] | all SECONDS | repro TARGET FILE... | list"
    command="$1"
    shift
    case $command in
        list)
            printf '%s\n' "${TARGETS[@]}" ;;
        coverage)
            [[ $# -ge 1 ]] || set -- "${TARGETS[@]}"
            for target in "$@"; do coverage "$target"; done ;;
        build)
            [[ $# -gt 0 ]] || set -- "${TARGETS[@]}"
            for target in "$@"; do build_target "$target"; done ;;
        keep)
            [[ $# -gt 0 ]] || set -- "${TARGETS[@]}"
            mkdir -p "$FUZZ_DIR/logs"
            for target in "$@"; do keep "$target"; done ;;
        all)
            [[ $# -ge 1 ]] || die "usage: fuzz/run.sh all SECONDS [ARGS...]"
            # The shared libraries first, once; then the targets' own builds and runs side by side.
            build_libs
            each_target build_target || exit 1
            each_target run_target "$@" ;;
        repro)
            [[ $# -ge 2 ]] || die "usage: fuzz/run.sh repro TARGET FILE..."
            target=$1
            shift
            build_target "$target"
            "$BUILD_DIR/bin/$target" -rss_limit_mb="$FUZZ_RSS_MB" -timeout="$FUZZ_TIMEOUT" "$@" ;;
        *)
            is_target "$command" || die "unknown target or command '$command' (targets: ${TARGETS[*]})"
            [[ $# -ge 1 ]] || die "usage: fuzz/run.sh $command SECONDS [ARGS...]"
            run_target "$command" "$@" ;;
    esac
}

main "$@"; exit $?
