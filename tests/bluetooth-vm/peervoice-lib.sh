# shellcheck shell=bash
# Helpers for the PeerVoice guest scripts (peervoice-a.sh, peervoice-b.sh): one peervoiced on a
# private session bus in this VM, its signals recorded by `gdbus monitor`, calls through gdbus.
# Source after guest-lib.sh.

PV_BIN=$BTVM_REPO/.build/debug/peervoiced
PV_CTL=$BTVM_REPO/.build/debug/peervoicectl
PV_LOG=$OUT/peervoiced.log
PV_SIGNALS=$OUT/signals.log
PV_MARK=0

# pv_start NAME: a headless PipeWire (virtual mic and speaker) and a session bus, then
# `peervoiced --default-agent` named NAME with its own state directory (capture processing off); waits until it serves and
# its profile and agent are registered with BlueZ.
pv_start() {
    [[ -x $PV_BIN ]] || fail "$PV_BIN is missing: build it first (swift build)"
    # WirePlumber gives up when it cannot watch logind's directories, which this VM's fresh /run
    # lacks; empty ones do (nobody is logged in).
    mkdir -p /run/systemd/seats /run/systemd/users /run/systemd/sessions /run/systemd/machines
    # The PipeWire session has its own bus (for WirePlumber); peervoiced only needs its socket.
    PEERVOICE_PW_TIMEOUT=60 "$BTVM_REPO/scripts/pipewire-session.sh" start /tmp/pw >> "$OUT/pipewire.log" 2>&1 \
        || { cp -r /tmp/pw/logs "$OUT/pipewire-logs" 2>/dev/null; fail "PipeWire did not start: $(tail -n 5 "$OUT/pipewire.log")"; }
    export PIPEWIRE_RUNTIME_DIR=/tmp/pw/run PIPEWIRE_REMOTE=pipewire-0
    start_session_bus || fail "no session bus"
    : > "$PV_SIGNALS"
    LANG=C.UTF-8 gdbus monitor --session --dest org.example.PeerVoice >> "$PV_SIGNALS" 2>&1 &
    # Capture processing (echo cancellation, noise suppression) is tested on the host; in a TCG VM
    # its cost on the emulated CPU would only test the emulator.
    "$PV_BIN" --default-agent --verbose --no-echo-cancel --no-noise-suppression --name "$1" --state-dir "$OUT/state" >> "$PV_LOG" 2>&1 &
    PV_PID=$!
    wait_name org.example.PeerVoice session 30 || fail "peervoiced did not start: $(tail -n 5 "$PV_LOG")"
    pv_wait_log 'registered the PeerVoice profile' 30 || fail "peervoiced did not register with BlueZ"
    poll 30 "Adapter hci0" pv_property_is Adapter "'$ADAPTER'" || fail "Adapter is not $ADAPTER"
    log "peervoiced $1 running (pid $PV_PID), adapter $ADAPTER"
}

# pv METHOD ARGS...: calls org.example.PeerVoice.METHOD (gdbus syntax for the arguments).
pv() {
    local method=$1
    shift
    gdbus call --session -d org.example.PeerVoice -o /org/example/PeerVoice -m "org.example.PeerVoice.$method" "$@"
}

# pv_connect PEER: Connect with the long timeout a pairing needs; prints the reply or the error.
pv_connect() {
    gdbus call --timeout 90 --session -d org.example.PeerVoice -o /org/example/PeerVoice \
        -m org.example.PeerVoice.Connect "$1" 2>&1
}

pv_property_is() {
    [[ $(gdbus call --session -d org.example.PeerVoice -o /org/example/PeerVoice \
            -m org.freedesktop.DBus.Properties.Get org.example.PeerVoice "$1" 2>/dev/null) == "(<$2>,)" ]]
}

# pv_mark: later pv_wait calls only look at signals recorded from now on.
pv_mark() { PV_MARK=$(wc -l < "$PV_SIGNALS"); }

_pv_has_signal() { tail -n +"$((PV_MARK + 1))" "$PV_SIGNALS" | grep -Eq "$1"; }

# pv_wait SIGNAL ARGS_REGEX [TIMEOUT]: waits for the signal (since the last pv_mark) whose
# argument text, e.g. ('00:AA:01:00:00:42', 'connected'), matches ARGS_REGEX.
pv_wait() {
    poll "${3:-60}" "$1 $2" _pv_has_signal "org\\.example\\.PeerVoice\\.$1 .*$2"
}

# pv_identified ADDRESS [TIMEOUT]: prints the peer id that PeerIdentified(ADDRESS, id) gave
# (the latest), waiting for one; signals name the device by that id from then on.
pv_identified() {
    poll "${2:-60}" "PeerIdentified $1" _pv_has_identified "$1" || return 1
    grep -Eo "PeerVoice\.PeerIdentified \('$1', 'pv:[a-z2-7]{26}'\)" "$PV_SIGNALS" | tail -n 1 | grep -Eo 'pv:[a-z2-7]{26}'
}

_pv_has_identified() { grep -Eq "PeerVoice\.PeerIdentified \('$1', 'pv:" "$PV_SIGNALS"; }

_pv_log_has() { grep -q "$1" "$PV_LOG"; }

# pv_wait_log TEXT [TIMEOUT]: waits for a line of peervoiced's log containing TEXT.
pv_wait_log() { poll "${2:-60}" "peervoiced log: $1" _pv_log_has "$1"; }

# pv_auto_confirm: in the background, answers every PairingRequested (BlueZ's, naming an
# address, and PeerVoice's, naming an id) with the answer in $OUT/pairing-answer (true or false;
# true when absent), like a person who always says yes.
pv_auto_confirm() {
    (
        tail -n +1 -F "$PV_SIGNALS" 2>/dev/null | while IFS= read -r line; do
            [[ $line =~ PeerVoice\.PairingRequested\ \(\'([0-9A-F:]{17}|pv:[a-z2-7]{26})\',.*\'([0-9]*)\'\) ]] || continue
            peer=${BASH_REMATCH[1]}
            answer=$(cat "$OUT/pairing-answer" 2>/dev/null || echo true)
            if reply=$(pv ConfirmPairing "$peer" "$answer" 2>&1); then
                log "auto-confirm: PairingRequested $peer code ${BASH_REMATCH[2]:-none}: answered $answer"
            else
                log "auto-confirm: ConfirmPairing $peer $answer: $reply"
            fi
        done
    ) &
}

# pv_confirm_until_done PID ADDRESS: like a person at this computer, answers yes to every
# PairingRequested (since the last pv_mark) for ADDRESS or for the id it turned out to have, until
# process PID (a Connect) has ended: first BlueZ's pairing (named by the address), then, on first
# contact, the peer link's own code (named by the id). Prints how many it answered.
pv_confirm_until_done() {
    local pid=$1 address=$2 answered=0 prompts peer
    while _btvm_running "$pid"; do
        mapfile -t prompts < <(tail -n +"$((PV_MARK + 1))" "$PV_SIGNALS" \
            | grep -Eo "PeerVoice\.PairingRequested \('($address|pv:[a-z2-7]{26})'" | grep -Eo "'[^']*'" | tr -d "'")
        while (( answered < ${#prompts[@]} )); do
            peer=${prompts[$answered]}
            answered=$((answered + 1))
            if pv ConfirmPairing "$peer" true > /dev/null 2>&1; then
                log "confirmed pairing prompt $answered for $peer" >&2
            else
                log "ConfirmPairing $peer (prompt $answered) failed: no prompt pending any more" >&2
            fi
        done
        nap 0.2
    done
    echo "$answered"
}

# pv_voice_counts PEER: "SENT RECEIVED" from the line peervoiced logs when voice with PEER
# stops ("voice with PEER stopped (...): sent N packets, received N, ...").
pv_voice_counts() {
    # The voice thread writes that line once it has wound the session down: wait for it.
    pv_wait_log "voice with $1 stopped (" 90 >&2 || return 0
    grep "voice with $1 stopped (" "$PV_LOG" | tail -n 1 | sed -E 's/.*sent ([0-9]+) packets, received ([0-9]+),.*/\1 \2/'
}

# pv_remove_device ADDRESS: forgets the Bluetooth pairing with ADDRESS (Adapter1.RemoveDevice).
pv_remove_device() {
    busctl --system call org.bluez "$ADAPTER_PATH" org.bluez.Adapter1 RemoveDevice o "$(device_path "$1")"
}

# pv_dump: what to look at when something failed.
pv_dump() {
    log "--- last signals:"
    tail -n 15 "$PV_SIGNALS"
    log "--- last peervoiced log lines:"
    tail -n 25 "$PV_LOG"
}
