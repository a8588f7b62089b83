#!/usr/bin/env bash
# The cost of the crypto on the message path, counted in instructions (valgrind's callgrind is
# repeatable where timings on a shared machine are not): both daemons of a short bench-messages
# run under callgrind, then the share of each process's instructions spent in libsodium
# (AEAD sealing and opening of every frame, X25519 and BLAKE2b of the handshake).
# Usage: bench/crypto-cost.sh [MESSAGES]   (after `swift build -c release`)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
messages=${1:-300}
work=$(mktemp -d /tmp/peervoice-crypto-cost.XXXXXX)
trap 'rm -rf "$work"' EXIT
bin=$(cd "$repo" && swift build -c release --show-bin-path)/peervoiced
cat > "$work/peervoiced" <<WRAP
#!/bin/bash
exec valgrind --tool=callgrind --callgrind-out-file=$work/callgrind.%p.out "$bin" "\$@"
WRAP
chmod +x "$work/peervoiced"
/usr/bin/python3 "$repo/bench/messages.py" --bin "$work/peervoiced" --runs 1 -n "$messages" --duration 2 --rate 100 \
    --idle-timeout 60 --output "$work/messages.json" > "$work/bench.log" 2>&1 || { cat "$work/bench.log"; exit 1; }
echo "crypto share of each daemon's instructions ($messages throughput messages + 200 latency messages, one link):"
for out in "$work"/callgrind.*.out; do
    callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null | awk -v name="$(basename "$out")" '
        /PROGRAM TOTALS/ { gsub(",", "", $1); total = $1 }
        /libsodium/ && /crypto_aead_xchacha20poly1305_ietf_(encrypt|decrypt) / { gsub(",", "", $1); aead += $1 }
        /libsodium/ && /crypto_scalarmult /  { gsub(",", "", $1); dh += $1 }
        /libsodium/ && /crypto_generichash / { gsub(",", "", $1); hash += $1 }
        END { printf "  %s: %d instructions; AEAD %.2f %%, X25519 %.2f %%, BLAKE2b %.2f %%; crypto in all %.2f %% (target < 5 %%)\n",
                     name, total, 100*aead/total, 100*dh/total, 100*hash/total, 100*(aead+dh+hash)/total }'
done
