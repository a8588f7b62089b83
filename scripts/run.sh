#!/usr/bin/env bash
# Usage: scripts/run.sh [ARGS...]   (what `make run ARGS=...` calls)
#
# Runs .build/debug/peervoiced ARGS as the invoking user, on that user's session bus.
# PEERVOICED=/path/to/binary runs another build (e.g. .build/release/peervoiced).
#
# - Under sudo (root with SUDO_USER set), the script re-runs itself as SUDO_USER with runuser,
#   keeping the environment except HOME/SHELL/USER/LOGNAME, and points XDG_RUNTIME_DIR and the
#   bus at that user's /run/user/UID when they exist: sudo drops both from the environment.
# - The session bus is DBUS_SESSION_BUS_ADDRESS, or when that is unset the standard per-user
#   socket $XDG_RUNTIME_DIR/bus (where libdbus and sd-bus look too). If neither answers
#   org.freedesktop.DBus.GetId, a private dbus-daemon (session config) is started in a fresh
#   directory under $XDG_RUNTIME_DIR (or $TMPDIR, /tmp), its address is printed as an
#   `export DBUS_SESSION_BUS_ADDRESS=...` line to paste into other terminals, and it is stopped
#   (and the directory removed) when peervoiced exits.
# - Exits with peervoiced's exit status.
set -euo pipefail

script=$(readlink -f "${BASH_SOURCE[0]}")
repo=$(dirname "$(dirname "$script")")
bin=${PEERVOICED:-$repo/.build/debug/peervoiced}

# --- run as the invoking user, not root, when started through sudo -----------------------------
if [[ $(id -u) -eq 0 && -n "${SUDO_USER:-}" && "$SUDO_USER" != root ]]; then
    uid=$(id -u "$SUDO_USER")
    if [[ -d /run/user/$uid ]]; then
        export XDG_RUNTIME_DIR=/run/user/$uid
    else
        unset XDG_RUNTIME_DIR
    fi
    if [[ -z "${DBUS_SESSION_BUS_ADDRESS:-}" && -S /run/user/$uid/bus ]]; then
        export DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$uid/bus
    fi
    export PEERVOICED=$bin
    exec runuser -u "$SUDO_USER" -- "$script" "$@"
fi

if [[ ! -x "$bin" ]]; then
    echo "run.sh: $bin not found; run 'make build' first" >&2
    exit 1
fi

# --- find a session bus that answers ----------------------------------------------------------
bus_answers() {
    if command -v dbus-send >/dev/null 2>&1; then
        timeout 5 dbus-send --session --dest=org.freedesktop.DBus --type=method_call \
            --print-reply / org.freedesktop.DBus.GetId >/dev/null 2>&1
    elif command -v busctl >/dev/null 2>&1; then
        timeout 5 busctl --user status >/dev/null 2>&1
    else
        return 1
    fi
}

if [[ -z "${DBUS_SESSION_BUS_ADDRESS:-}" && -n "${XDG_RUNTIME_DIR:-}" && -S "$XDG_RUNTIME_DIR/bus" ]]; then
    export DBUS_SESSION_BUS_ADDRESS=unix:path=$XDG_RUNTIME_DIR/bus
fi

bus_dir=
bus_pid=
stop_private_bus() {
    if [[ -n "$bus_pid" ]]; then
        kill "$bus_pid" 2>/dev/null || true
        bus_pid=
    fi
    if [[ -n "$bus_dir" ]]; then
        rm -rf "$bus_dir"
        bus_dir=
    fi
}
trap stop_private_bus EXIT

if [[ -n "${DBUS_SESSION_BUS_ADDRESS:-}" ]] && bus_answers; then
    echo "run.sh: using the session bus at $DBUS_SESSION_BUS_ADDRESS" >&2
else
    if [[ -n "${DBUS_SESSION_BUS_ADDRESS:-}" ]]; then
        echo "run.sh: the session bus at $DBUS_SESSION_BUS_ADDRESS does not answer" >&2
    else
        echo "run.sh: DBUS_SESSION_BUS_ADDRESS is not set and there is no session bus" >&2
    fi
    if [[ -n "${XDG_RUNTIME_DIR:-}" && -d "$XDG_RUNTIME_DIR" && -w "$XDG_RUNTIME_DIR" ]]; then
        bus_dir=$(mktemp -d "$XDG_RUNTIME_DIR/peervoice-bus.XXXXXX")
    else
        bus_dir=$(mktemp -d "${TMPDIR:-/tmp}/peervoice-bus.XXXXXX")
    fi
    address="unix:path=$bus_dir/bus"
    # Prints the address, then the pid, then forks away (its stdout is then /dev/null).
    out=$(dbus-daemon --session --fork --nopidfile --address="$address" \
        --print-address=1 --print-pid=1)
    bus_pid=$(sed -n 2p <<<"$out")
    if ! [[ "$bus_pid" =~ ^[0-9]+$ ]]; then
        echo "run.sh: dbus-daemon did not start: $out" >&2
        bus_pid=
        exit 1
    fi
    export DBUS_SESSION_BUS_ADDRESS=$address
    echo "run.sh: started a private session bus (dbus-daemon pid $bus_pid); it stops when peervoiced exits." >&2
    echo "run.sh: to reach it from another terminal (busctl --user and gdbus only find it through this variable), paste:" >&2
    echo "export DBUS_SESSION_BUS_ADDRESS='$address'"
    echo "run.sh: then e.g.  busctl --user introspect org.example.PeerVoice /org/example/PeerVoice" >&2
fi

# --- run peervoiced ---------------------------------------------------------------------------
# In the background so that this shell can act on signals while it waits; `trap - INT QUIT`
# undoes the SIG_IGN that bash gives background jobs, and stdin stays the terminal.
# Ctrl-C (and a terminal hang-up) reaches peervoiced directly, as it is in our process group, so
# INT/QUIT/HUP only keep us waiting for it; TERM sent to this script is passed on.
( trap - INT QUIT; exec "$bin" "$@" ) <&0 &
child=$!
trap ':' INT QUIT HUP
trap 'kill -TERM "$child" 2>/dev/null || true' TERM
set +e
while :; do
    wait "$child"
    rc=$?
    kill -0 "$child" 2>/dev/null || break   # still there: wait was cut short by a signal
done
exit "$rc"
