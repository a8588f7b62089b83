#!/usr/bin/env bash
# A private, headless PipeWire + WirePlumber for PeerVoice's tests and benchmarks.
#
#   scripts/pipewire-session.sh start DIR   start one under DIR (DIR is created if missing)
#   scripts/pipewire-session.sh stop DIR    stop it (by PID) and leave nothing running
#   scripts/pipewire-session.sh status DIR  exit 0 when its PipeWire answers
#
# Everything lives under DIR, so several sessions (one per peer) can run side by side:
#   DIR/run      XDG_RUNTIME_DIR and PIPEWIRE_RUNTIME_DIR (the sockets pipewire-0 and bus)
#   DIR/config   XDG_CONFIG_HOME (pipewire/pipewire.conf.d/50-peervoice-test.conf)
#   DIR/state    XDG_STATE_HOME (WirePlumber's remembered volumes and defaults)
#   DIR/logs     dbus.log, pipewire.log, wireplumber.log
#   DIR/env.sh   `. DIR/env.sh` points pw-* tools and peervoiced at this PipeWire
#   DIR/*.pid    dbus.pid, pipewire.pid, wireplumber.pid
#
# The graph runs at 48 kHz with a default quantum of 256 (5.33 ms), and has two virtual devices,
# both mono and both the defaults WirePlumber picks:
#   peervoice-test-mic      Audio/Source/Virtual: play into input_MONO, apps capture capture_MONO
#   peervoice-test-speaker  Audio/Sink: apps play into playback_MONO, record monitor_MONO
# Needs: pipewire, pipewire-bin, wireplumber, dbus-daemon (Debian 12).
set -euo pipefail

QUANTUM=${PEERVOICE_PW_QUANTUM:-256}
TIMEOUT_S=${PEERVOICE_PW_TIMEOUT:-20}

usage() { echo "usage: $0 start|stop|status DIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
CMD=$1
DIR=$2

die() { echo "pipewire-session: $*" >&2; exit 1; }

# Polls "$@" every 20 ms until it succeeds, for at most TIMEOUT_S seconds.
wait_until() {
    local what=$1; shift
    local deadline=$((SECONDS + TIMEOUT_S))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            echo "pipewire-session: timed out waiting for $what" >&2
            return 1
        fi
        sleep 0.02
    done
}

# True while PID $1 runs (a zombie waiting for PID 1 to reap it counts as ended).
running() { [[ -r /proc/$1/stat ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }

# True when pid file $1 names a running process called $2 (guards against a recycled PID).
alive() {
    [[ -f $1 ]] || return 1
    local pid
    pid=$(cat "$1")
    running "$pid" && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]]
}

# Stops the process in pid file $1 (named $2) with SIGTERM, SIGKILL after 3 s; removes the file.
stop_pid() {
    local file=$1 name=$2 pid
    [[ -f $file ]] || return 0
    pid=$(cat "$file")
    if alive "$file" "$name"; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 300); do running "$pid" || break; sleep 0.01; done
        if running "$pid"; then
            echo "pipewire-session: $name ($pid) ignored SIGTERM; killing it" >&2
            kill -KILL "$pid" 2>/dev/null || true
            for _ in $(seq 300); do running "$pid" || break; sleep 0.01; done
        fi
    fi
    rm -f "$file"
}

stop() {
    [[ -d $DIR ]] || return 0
    stop_pid "$DIR/wireplumber.pid" wireplumber
    stop_pid "$DIR/pipewire.pid" pipewire
    stop_pid "$DIR/dbus.pid" dbus-daemon
}

write_config() {
    local conf=$DIR/config/pipewire/pipewire.conf.d
    mkdir -p "$conf"
    cat >"$conf/50-peervoice-test.conf" <<EOF
# Written by scripts/pipewire-session.sh: the test graph and its two virtual devices.
context.properties = {
    default.clock.rate          = 48000
    default.clock.allowed-rates = [ 48000 ]
    default.clock.quantum       = $QUANTUM
    default.clock.min-quantum   = 32
    default.clock.max-quantum   = 2048
    # node.latency is rounded to a power of two unless this is off (480 -> 256 otherwise).
    clock.power-of-two-quantum  = false
}
context.objects = [
    { factory = adapter
        args = {
            factory.name             = support.null-audio-sink
            node.name                = "peervoice-test-mic"
            node.description         = "PeerVoice test microphone"
            media.class              = "Audio/Source/Virtual"
            audio.position           = [ MONO ]
            audio.rate               = 48000
            object.linger            = true
            monitor.channel-volumes  = true
            adapter.auto-port-config = { mode = dsp monitor = true position = preserve }
        }
    }
    { factory = adapter
        args = {
            factory.name             = support.null-audio-sink
            node.name                = "peervoice-test-speaker"
            node.description         = "PeerVoice test speaker"
            media.class              = "Audio/Sink"
            audio.position           = [ MONO ]
            audio.rate               = 48000
            object.linger            = true
            monitor.channel-volumes  = true
            adapter.auto-port-config = { mode = dsp monitor = true position = preserve }
        }
    }
]
EOF
}

write_env() {
    # PIPEWIRE_RUNTIME_DIR wins over XDG_RUNTIME_DIR in libpipewire, and PIPEWIRE_REMOTE over the
    # default socket name: set both so a caller's own PipeWire settings cannot leak in.
    cat >"$DIR/env.sh" <<EOF
export XDG_RUNTIME_DIR='$DIR/run'
export PIPEWIRE_RUNTIME_DIR='$DIR/run'
export PIPEWIRE_REMOTE=pipewire-0
export XDG_CONFIG_HOME='$DIR/config'
export XDG_STATE_HOME='$DIR/state'
export XDG_DATA_HOME='$DIR/data'
export DBUS_SESSION_BUS_ADDRESS='unix:path=$DIR/run/bus'
EOF
}

# Spawns "$@" in the background with the session's environment; its PID goes to DIR/$name.pid.
spawn() {
    local name=$1; shift
    "$@" </dev/null >"$DIR/logs/$name.log" 2>&1 &
    echo $! >"$DIR/$name.pid"
}

mic_and_speaker_ready() {
    local ports
    ports=$(pw-link -io) || return 1
    grep -qx 'peervoice-test-mic:capture_MONO' <<<"$ports" &&
        grep -qx 'peervoice-test-mic:input_MONO' <<<"$ports" &&
        grep -qx 'peervoice-test-speaker:playback_MONO' <<<"$ports" &&
        grep -qx 'peervoice-test-speaker:monitor_MONO' <<<"$ports"
}

defaults_chosen() {
    local defaults
    defaults=$(pw-metadata -n default 0) || return 1
    grep -q "default.audio.source'.*peervoice-test-mic" <<<"$defaults" &&
        grep -q "default.audio.sink'.*peervoice-test-speaker" <<<"$defaults"
}

start() {
    for tool in dbus-daemon pipewire wireplumber pw-cli pw-link pw-metadata; do
        command -v "$tool" >/dev/null || die "$tool not found (install pipewire pipewire-bin wireplumber dbus-daemon)"
    done
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd)
    # A unix socket path holds at most 107 bytes.
    ((${#DIR} + 16 <= 107)) || die "DIR is too long for a unix socket path: $DIR"
    local name
    for name in wireplumber:wireplumber pipewire:pipewire dbus:dbus-daemon; do
        alive "$DIR/${name%%:*}.pid" "${name#*:}" && die "already running under $DIR (${name%%:*}.pid); stop it first"
    done
    rm -rf "$DIR/run" "$DIR/config" "$DIR/state" "$DIR/data" "$DIR/logs"
    mkdir -p "$DIR/run" "$DIR/state" "$DIR/data" "$DIR/logs"
    chmod 700 "$DIR/run"
    write_config
    write_env
    # shellcheck disable=SC1091
    . "$DIR/env.sh"
    unset PIPEWIRE_DEBUG PIPEWIRE_LATENCY PIPEWIRE_NODE PIPEWIRE_PROPS PIPEWIRE_CONFIG_DIR PIPEWIRE_CONFIG_NAME

    trap 'stop' ERR
    spawn dbus dbus-daemon --session --nofork --nopidfile --address="$DBUS_SESSION_BUS_ADDRESS"
    wait_until "dbus-daemon ($DIR/run/bus)" test -S "$DIR/run/bus"

    spawn pipewire pipewire
    wait_until "pipewire (pw-cli info 0)" pw-cli info 0
    wait_until "the virtual mic and speaker ports" mic_and_speaker_ready

    # WirePlumber 0.4 exits at once without a session bus; it links streams and picks defaults.
    spawn wireplumber wireplumber
    wait_until "WirePlumber to choose the default source and sink" defaults_chosen
    trap - ERR
    for name in dbus:dbus-daemon pipewire:pipewire wireplumber:wireplumber; do
        alive "$DIR/${name%%:*}.pid" "${name#*:}" ||
            { stop; die "${name#*:} died: $(tail -n 5 "$DIR/logs/${name%%:*}.log")"; }
    done
}

case $CMD in
    start) start ;;
    stop) stop ;;
    status)
        [[ -f $DIR/env.sh ]] || exit 1
        # shellcheck disable=SC1091
        . "$DIR/env.sh"
        pw-cli info 0 >/dev/null 2>&1 || exit 1
        ;;
    *) usage ;;
esac
