# shellcheck shell=bash
# Helpers for guest scripts of tests/bluetooth-vm/run-pair.sh. Source it inside a VM:
#     source "$BTVM_LIB"
# Environment set by the harness before a guest script starts (see README.md):
#     VM_NAME (a|b), PEER_NAME (b|a), SHARED, OUT, ADAPTER (hci0), ADAPTER_PATH (/org/bluez/hci0),
#     ADDRESS (own BD address), ADDRESS_FILE ($SHARED/$VM_NAME.address),
#     PEER_ADDRESS_FILE ($SHARED/$PEER_NAME.address), BTVM_LIB (this file), BTVM_DIR (its
#     directory), BTVM_REPO (the repository, e.g. $BTVM_REPO/.build/debug/peervoiced).
# Every wait below polls (never a fixed sleep), takes an optional timeout in seconds (default
# $BTVM_WAIT_TIMEOUT, 90) and fails at once when the peer VM's guest script has already exited
# without producing what is waited for. Functions return non-zero on failure; they do not exit.

: "${VM_NAME:?guest-lib.sh: VM_NAME is not set (not inside a run-pair.sh VM?)}"
: "${SHARED:?guest-lib.sh: SHARED is not set}"
: "${OUT:=$SHARED/$VM_NAME}"
: "${PEER_NAME:=$([[ $VM_NAME == a ]] && echo b || echo a)}"
: "${ADAPTER:=hci0}"
: "${ADAPTER_PATH:=/org/bluez/$ADAPTER}"
: "${ADDRESS_FILE:=$SHARED/$VM_NAME.address}"
: "${PEER_ADDRESS_FILE:=$SHARED/$PEER_NAME.address}"
: "${BTVM_WAIT_TIMEOUT:=90}"
: "${BTVM_BLUETOOTHD_ARGS:=-d}"
BTVM_STATE=/run/btvm
mkdir -p "$BTVM_STATE"

# Under TCG every exec of a dynamically linked program costs ~50 ms (busctl ~200 ms), so the
# helpers use bash builtins where they can: $EPOCHREALTIME, read, and a sleep that waits on a FIFO.
if [[ -z ${_BTVM_SLEEP_FD:-} ]]; then
    rm -f "$BTVM_STATE/sleep.$$"
    mkfifo "$BTVM_STATE/sleep.$$"
    exec {_BTVM_SLEEP_FD}<> "$BTVM_STATE/sleep.$$"
    rm -f "$BTVM_STATE/sleep.$$"
fi

# nap SECONDS: sleeps without starting a process (nothing is ever written to the FIFO).
nap() { read -r -t "$1" -u "$_BTVM_SLEEP_FD" _ || true; }

# uptime_s: the guest's uptime in seconds (e.g. 12.34).
uptime_s() { local up _; read -r up _ < /proc/uptime; printf '%s\n' "$up"; }

# ---------------------------------------------------------------------------------------------
# Logging and timing

# now: seconds since the epoch with microsecond precision (e.g. 1700000000.123456).
now() { printf '%s\n' "$EPOCHREALTIME"; }

# log MESSAGE...: one line "[a +12.34s] MESSAGE" on stdout (the guest log); the time is uptime.
log() { local up _; read -r up _ < /proc/uptime; printf '[%s +%ss] %s\n' "$VM_NAME" "$up" "$*"; }

# fail MESSAGE...: log "FAIL: MESSAGE" and exit 1 (for guest scripts, not for functions).
fail() { log "FAIL: $*"; exit 1; }

# timing NAME START: records the seconds elapsed since START (a value of `now`) as NAME in
# $OUT/timings and logs "TIMING NAME 1.234s"; run-pair.sh prints all of them in its summary.
timing() {
    local end=$EPOCHREALTIME start=$2 us secs
    [[ $start == *.* ]] || start+=.000000
    us=$(( 10#${end/./} - 10#${start/./} ))
    printf -v secs '%d.%03d' $(( us / 1000000 )) $(( us % 1000000 / 1000 ))
    printf '%s %s\n' "$1" "$secs" >> "$OUT/timings"
    log "TIMING $1 ${secs}s"
}

# ---------------------------------------------------------------------------------------------
# Waiting and coordination between the VMs (through the read-write share $SHARED)

# _btvm_peer_gone: true when the peer's guest script (or its harness) has finished.
_btvm_peer_gone() { [[ -e $SHARED/$PEER_NAME.exit ]]; }

# poll TIMEOUT DESCRIPTION COMMAND...: runs COMMAND every 0.2 s until it succeeds; fails after
# TIMEOUT seconds, or early when the peer VM has finished and COMMAND still fails.
poll() {
    local timeout=$1 what=$2 deadline peer_gone=0
    shift 2
    deadline=$(( EPOCHSECONDS + timeout ))
    while ! "$@"; do
        if (( peer_gone )); then
            log "gave up waiting for $what: VM $PEER_NAME finished (exit $(cat "$SHARED/$PEER_NAME.exit" 2>/dev/null))"
            return 1
        fi
        _btvm_peer_gone && peer_gone=1   # one more try: the peer may have done it just before
        if (( EPOCHSECONDS >= deadline )); then
            log "timed out after ${timeout}s waiting for $what"
            return 1
        fi
        nap 0.2
    done
}

# wait_for FILE [TIMEOUT]: waits until FILE exists and is not empty.
wait_for() { poll "${2:-$BTVM_WAIT_TIMEOUT}" "$1" test -s "$1"; }

# write_shared FILE CONTENT...: writes a file atomically (readers never see it half-written).
write_shared() {
    local file=$1
    shift
    printf '%s\n' "$*" > "$file.tmp.$VM_NAME" && mv -f "$file.tmp.$VM_NAME" "$file"
}

# barrier NAME [TIMEOUT]: returns when both VMs have called `barrier NAME`. Use each NAME once.
barrier() {
    mkdir -p "$SHARED/barriers"
    write_shared "$SHARED/barriers/$1.$VM_NAME" "$(now)"
    poll "${2:-$BTVM_WAIT_TIMEOUT}" "barrier $1 (VM $PEER_NAME)" test -s "$SHARED/barriers/$1.$PEER_NAME" \
        || return 1
    log "barrier $1 passed"
}

# peer_address [TIMEOUT]: prints the peer's BD address once it has published it.
peer_address() { wait_for "$PEER_ADDRESS_FILE" "${1:-}" >&2 && head -n1 "$PEER_ADDRESS_FILE"; }

# ---------------------------------------------------------------------------------------------
# D-Bus

# start_session_bus: starts a private session dbus-daemon and exports DBUS_SESSION_BUS_ADDRESS
# and SESSION_BUS_PID. stop_session_bus stops it (the VM's power-off does too).
# It activates nothing: the guest's /usr is the host's, and while the host has the PeerVoice
# package installed (make test-package in a parallel run), `gdbus monitor --dest` would start the
# package's peervoiced by activation, which then holds the name the test's own needs.
start_session_bus() {
    local addr_file=$BTVM_STATE/session-bus.$$ config=$BTVM_STATE/session-bus.$$.conf
    rm -f "$addr_file"
    cat > "$config" <<'CONF'
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:tmpdir=/tmp</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
CONF
    dbus-daemon --config-file="$config" --nofork --nopidfile --print-address=3 3> "$addr_file" \
        < /dev/null >> "$OUT/dbus-session.log" 2>&1 &
    SESSION_BUS_PID=$!
    poll 30 "the session bus" test -s "$addr_file" || return 1
    DBUS_SESSION_BUS_ADDRESS=$(head -n1 "$addr_file")
    export DBUS_SESSION_BUS_ADDRESS SESSION_BUS_PID
    log "session bus $DBUS_SESSION_BUS_ADDRESS (pid $SESSION_BUS_PID)"
}

stop_session_bus() {
    [[ -n ${SESSION_BUS_PID:-} ]] || return 0
    kill "$SESSION_BUS_PID" 2>/dev/null
    wait "$SESSION_BUS_PID" 2>/dev/null
    unset SESSION_BUS_PID DBUS_SESSION_BUS_ADDRESS
}

# name_has_owner NAME [system|session]: true when NAME has an owner on that bus (default system);
# never auto-starts anything (`busctl status` fails in the VM: use this).
name_has_owner() {
    local bus=--system
    [[ ${2:-system} == session ]] && bus=--user
    [[ $(busctl "$bus" call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
           NameHasOwner s "$1" 2>/dev/null) == "b true" ]]
}

# wait_name NAME [system|session] [TIMEOUT]: waits until NAME has an owner on that bus.
wait_name() { poll "${3:-$BTVM_WAIT_TIMEOUT}" "$1 on the ${2:-system} bus" name_has_owner "$1" "${2:-system}"; }

# bluez_prop PATH INTERFACE PROPERTY: prints the value of a BlueZ property (strings unquoted,
# booleans as true/false); fails when the object or property does not exist.
bluez_prop() {
    local v
    v=$(busctl --system --auto-start=no get-property org.bluez "$1" "$2" "$3" 2>/dev/null) || return 1
    v=${v#* }
    [[ $v == \"*\" ]] && v=${v:1:-1}
    printf '%s\n' "$v"
}

# adapter_prop PROPERTY / device_prop ADDRESS PROPERTY: shorthands for bluez_prop.
adapter_prop() { bluez_prop "$ADAPTER_PATH" org.bluez.Adapter1 "$1"; }
device_prop() { bluez_prop "$(device_path "$1")" org.bluez.Device1 "$2"; }

# set_adapter_prop PROPERTY TYPE VALUE, e.g. set_adapter_prop Discoverable b true
set_adapter_prop() {
    busctl --system set-property org.bluez "$ADAPTER_PATH" org.bluez.Adapter1 "$1" "$2" "$3"
}

# device_path ADDRESS: the BlueZ object path of a remote device on our adapter.
device_path() { printf '%s/dev_%s\n' "$ADAPTER_PATH" "${1//:/_}"; }

# prop_is PATH INTERFACE PROPERTY VALUE: true when the property has that value now.
prop_is() { [[ $(bluez_prop "$1" "$2" "$3") == "$4" ]]; }

# wait_prop PATH INTERFACE PROPERTY VALUE [TIMEOUT]: waits until the property has that value.
wait_prop() {
    poll "${5:-$BTVM_WAIT_TIMEOUT}" "$3=$4 on $1" prop_is "$1" "$2" "$3" "$4"
}

# wait_device ADDRESS [TIMEOUT]: waits until BlueZ has an object for that remote device.
wait_device() {
    poll "${2:-$BTVM_WAIT_TIMEOUT}" "device $1 under org.bluez" \
        bluez_prop "$(device_path "$1")" org.bluez.Device1 Address > /dev/null
}

# ---------------------------------------------------------------------------------------------
# bluetoothd (one per VM, started by the harness; logs to $OUT/bluetoothd.log)

# bluetoothd_pid: the PID of the running bluetoothd.
bluetoothd_pid() { cat "$BTVM_STATE/bluetoothd.pid" 2>/dev/null; }

_btvm_adapter_on_bus() { bluez_prop "$ADAPTER_PATH" org.bluez.Adapter1 Address > /dev/null; }

# wait_adapter [TIMEOUT]: waits until org.bluez exports $ADAPTER_PATH.
wait_adapter() { poll "${1:-60}" "$ADAPTER_PATH on org.bluez" _btvm_adapter_on_bus; }

# power_on [TIMEOUT]: powers the adapter on and waits until Powered is true.
power_on() {
    set_adapter_prop Powered b true || return 1
    wait_prop "$ADAPTER_PATH" org.bluez.Adapter1 Powered true "${1:-30}"
}

# start_bluetoothd [--no-power] [TIMEOUT]: starts `bluetoothd -n $BTVM_BLUETOOTHD_ARGS`, waits
# for the adapter on D-Bus and (unless --no-power) powers it on.
start_bluetoothd() {
    local power=1
    [[ ${1:-} == --no-power ]] && { power=0; shift; }
    local timeout=${1:-60}
    local pid
    pid=$(bluetoothd_pid)
    if [[ -n $pid ]] && _btvm_running "$pid"; then
        log "bluetoothd already running (pid $pid)"
        return 1
    fi
    printf '==== bluetoothd starting at uptime %s\n' "$(uptime_s)" >> "$OUT/bluetoothd.log"
    # shellcheck disable=SC2086  # BTVM_BLUETOOTHD_ARGS is a list of options
    bluetoothd -n $BTVM_BLUETOOTHD_ARGS < /dev/null >> "$OUT/bluetoothd.log" 2>&1 &
    pid=$!
    echo "$pid" > "$BTVM_STATE/bluetoothd.pid"
    wait_adapter "$timeout" || return 1
    if (( power )); then power_on 30 || return 1; fi
    log "bluetoothd ready (pid $pid, $ADAPTER$( (( power )) && echo ' powered on'))"
}

_btvm_running() { [[ -d /proc/$1 ]] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
_btvm_not() { ! "$@"; }

# stop_bluetoothd [--kill]: stops bluetoothd by PID (SIGTERM; --kill: SIGKILL, like a crash)
# and waits until it is gone and org.bluez has no owner.
stop_bluetoothd() {
    local sig=TERM pid
    [[ ${1:-} == --kill ]] && sig=KILL
    pid=$(bluetoothd_pid)
    [[ -n $pid ]] || { log "stop_bluetoothd: no bluetoothd pid"; return 1; }
    log "stopping bluetoothd (pid $pid, SIG$sig)"
    kill -s "$sig" "$pid" 2>/dev/null
    poll 30 "bluetoothd (pid $pid) to exit" _btvm_not _btvm_running "$pid" || return 1
    rm -f "$BTVM_STATE/bluetoothd.pid"
    printf '==== bluetoothd (pid %s) stopped with SIG%s at uptime %s\n' "$pid" "$sig" "$(uptime_s)" \
        >> "$OUT/bluetoothd.log"
    poll 30 "org.bluez to lose its owner" _btvm_not name_has_owner org.bluez
}

# restart_bluetoothd [--kill] [--no-power] [TIMEOUT]: stop_bluetoothd, then start_bluetoothd;
# records the time as TIMING bluetoothd_restart.
restart_bluetoothd() {
    local stop_args=() start_args=() t0
    while [[ ${1:-} == --* ]]; do
        case $1 in
            --kill) stop_args+=(--kill) ;;
            --no-power) start_args+=(--no-power) ;;
            *) log "restart_bluetoothd: unknown option $1"; return 2 ;;
        esac
        shift
    done
    t0=$(now)
    stop_bluetoothd "${stop_args[@]}" || return 1
    start_bluetoothd "${start_args[@]}" "$@" || return 1
    timing bluetoothd_restart "$t0"
}

# ---------------------------------------------------------------------------------------------
# bluetoothctl as a long-lived client (for agents and discovery, which end with the client)

# btctl_start [NAME]: starts `bluetoothctl` reading commands from a FIFO; output goes to
# $OUT/bluetoothctl[-NAME].log (overwritten: give a second session another NAME). Then: btctl COMMAND... sends one command line; btctl_wait REGEX
# [TIMEOUT] waits until the output since btctl_start (or the last btctl_mark) has a matching line
# (extended regex, colours stripped); btctl_accept_until TIMEOUT WHAT COMMAND... polls COMMAND
# while answering "yes" to each question of bluetoothctl's agent; btctl_tail [N] prints the last
# lines of its output; btctl_stop quits it.
# Note: btvirt's controllers make BlueZ ask the agent to confirm (RequestConfirmation, passkey
# 000000) even when both agents are NoInputNoOutput, and bluetoothctl's agent then waits for a
# "yes" on its input: pair through btctl_accept_until on both sides.
btctl_start() {
    local name=${1:+-$1}
    BTCTL_LOG=$OUT/bluetoothctl$name.log
    local fifo=$BTVM_STATE/btctl$name.$$.fifo
    rm -f "$fifo"
    mkfifo "$fifo" || return 1
    : > "$BTCTL_LOG"
    BTCTL_START_LINE=0 BTCTL_ANSWERED=0
    bluetoothctl < "$fifo" >> "$BTCTL_LOG" 2>&1 &
    BTCTL_PID=$!
    exec {BTCTL_FD}> "$fifo"
    rm -f "$fifo"
}

btctl() { printf '%s\n' "$*" >&"$BTCTL_FD"; }

btctl_mark() { BTCTL_START_LINE=$(wc -l < "$BTCTL_LOG"); }

_btvm_btctl_has() { tail -n +"$((BTCTL_START_LINE + 1))" "$BTCTL_LOG" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g' | grep -Eq "$1"; }

btctl_wait() { poll "${2:-30}" "bluetoothctl output /$1/" _btvm_btctl_has "$1"; }

_btvm_btctl_clean() { sed 's/\x1b\[[0-9;]*[A-Za-z]//g; s/\r/\n/g' "$BTCTL_LOG" | grep -v '^[[:space:]]*$'; }

btctl_tail() { _btvm_btctl_clean | tail -n "${1:-15}"; }

# Answers "yes" once per "(yes/no)" question seen so far (a re-printed question after "Request
# canceled" gets a spare "yes", which bluetoothctl rejects as an unknown command: harmless).
_btvm_btctl_accepting() {
    local asked
    asked=$(_btvm_btctl_clean | grep -o '(yes/no)' | wc -l)
    while (( ${BTCTL_ANSWERED:-0} < asked )); do
        btctl yes
        BTCTL_ANSWERED=$(( ${BTCTL_ANSWERED:-0} + 1 ))
        log "bluetoothctl agent: answered yes"
    done
    "$@"
}

btctl_accept_until() {
    local timeout=$1 what=$2
    shift 2
    poll "$timeout" "$what" _btvm_btctl_accepting "$@"
}

btctl_stop() {
    [[ -n ${BTCTL_PID:-} ]] || return 0
    btctl quit 2>/dev/null
    exec {BTCTL_FD}>&-
    poll 10 "bluetoothctl to quit" _btvm_not _btvm_running "$BTCTL_PID" || kill "$BTCTL_PID" 2>/dev/null
    wait "$BTCTL_PID" 2>/dev/null
    unset BTCTL_PID BTCTL_FD
}
