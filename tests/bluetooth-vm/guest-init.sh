#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# PID 1 of a tests/bluetooth-vm VM, exec'd by the initramfs after it switch_root'ed into the host's
# root file system (read-only 9p + tmpfs overlay). Brings up the Bluetooth stack of this "computer"
# and runs the guest script, then powers the VM off:
#   mounts; the read-write share (9p tag "shared") at the same path as on the host ($SHARED);
#   modules bluetooth, hci_uart, rfcomm and the AF_ALG crypto bluetoothd uses; a system
#   dbus-daemon; btmon (optional); btattach on ttyS1 (the serial port wired to the host's btvirt)
#   -> hci0; bluetoothd -n; waits for /org/bluez/hci0 and powers it on; publishes the address;
#   runs the guest script with the environment described in README.md; records its exit code.
# Kernel arguments: btvm.vm=a|b btvm.shared=/host/path/of/the/share (btvm.init=this file).
# Everything goes to $OUT/guest.log (the host shows it live) and the VM's console.

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb
umask 022

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o mode=0755 tmpfs /run
# /tmp stays the overlay's (host paths under /tmp, e.g. a guest script, remain visible).
# The host's pairing database must neither leak in nor be written; a restarted bluetoothd keeps
# this VM's keys (they live until power-off).
mkdir -p /var/lib/bluetooth && mount -t tmpfs -o mode=0700 tmpfs /var/lib/bluetooth
ln -sf /proc/self/fd /dev/fd 2>/dev/null

VM_NAME='' SHARED=''
for arg in $(cat /proc/cmdline); do
    case $arg in
        btvm.vm=*) VM_NAME=${arg#btvm.vm=} ;;
        btvm.shared=*) SHARED=${arg#btvm.shared=} ;;
    esac
done
echo "btvm-$VM_NAME" > /proc/sys/kernel/hostname

poweroff_now() {
    sync
    [[ -n $SHARED ]] && umount "$SHARED" 2>/dev/null
    # reboot(2) at once: after a sysrq power-off PID 1 could exit first, and the kernel panics.
    exec /bin/busybox poweroff -f
}

if [[ -z $VM_NAME || -z $SHARED ]] || ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 shared "$SHARED"; then
    echo "btvm: cannot mount the shared directory (vm=$VM_NAME shared=$SHARED)"
    poweroff_now
fi
export VM_NAME SHARED OUT=$SHARED/$VM_NAME
mkdir -p "$OUT"
exec > >(tee -a "$OUT/guest.log" > /dev/console) 2>&1
# shellcheck source=/dev/null
source "$SHARED/.btvm/$VM_NAME.env" || { echo "btvm: cannot read $SHARED/.btvm/$VM_NAME.env"; poweroff_now; }
# shellcheck source=guest-lib.sh
source "$BTVM_LIB"
log "userspace up (kernel $(uname -r))"
write_shared "$OUT/stage" userspace "$(uptime_s)"

# _other_processes: true while a process other than PID 1 and kernel threads is alive.
_other_processes() {
    local p cmd
    for p in /proc/[0-9]*; do
        [[ ${p#/proc/} == 1 ]] && continue
        cmd=
        IFS= read -r -d '' cmd < "$p/cmdline" 2>/dev/null
        [[ -n $cmd ]] && return 0
    done
    return 1
}

# finish RC: records the result, stops every process (bluetoothd and btmon exit cleanly on
# SIGTERM), powers off.
finish() {
    local rc=$1 i
    write_shared "$OUT/rc" "$rc"
    write_shared "$SHARED/$VM_NAME.exit" "$rc"
    log "finished with exit code $rc"
    sleep 0.3                        # let tee copy the last lines
    kill -TERM -1 2>/dev/null
    for (( i = 0; i < 30; i++ )); do
        _other_processes || break
        sleep 0.1
    done
    kill -KILL -1 2>/dev/null
    poweroff_now
}

harness_fail() {
    log "HARNESS FAILURE: $*"
    write_shared "$OUT/harness-error" "$*"
    finish 97
}

[[ -e /etc/machine-id && -s /etc/machine-id ]] || dbus-uuidgen --ensure=/etc/machine-id

# --- kernel modules: the Bluetooth core, the H:4 UART driver, RFCOMM, and the crypto that
# bluetoothd and the kernel's SMP use through AF_ALG (ecb(aes), cmac(aes)). The initramfs has
# already loaded them (fast); modprobe only what is missing (slow under TCG: seconds).
missing=()
for module in bluetooth hci_uart rfcomm af_alg algif_hash algif_skcipher ecb cmac; do
    [[ -d /sys/module/$module ]] || missing+=("$module")
done
if (( ${#missing[@]} )); then
    modprobe -a "${missing[@]}" || harness_fail "modprobe ${missing[*]} failed"
    log "modules loaded: ${missing[*]}"
fi
# A crypto self-test that failed (e.g. for lack of a module) leaves ECDH or AES unusable, and
# pairing would then fail in obscure ways: stop here instead.
if dmesg | grep -E 'alg: .*(fail|Fail)'; then
    harness_fail "a kernel crypto self-test failed (see the console log); fix the module order in prepare-boot.sh"
fi

# --- in parallel: the system bus; btmon; the controller (ttyS1 is connected, through the host's
# relay, to an emulated controller in btvirt; btattach makes it hci0)
mkdir -p /run/dbus
dbus-daemon --system --nofork --nopidfile < /dev/null >> "$OUT/dbus-system.log" 2>&1 &
echo $! > "$BTVM_STATE/dbus-system.pid"
if [[ ${BTVM_BTMON:-1} == 1 ]]; then
    btmon -w "$OUT/btmon.snoop" < /dev/null > /dev/null 2>&1 &
    echo $! > "$BTVM_STATE/btmon.pid"
fi
btattach -B /dev/ttyS1 -P h4 < /dev/null >> "$OUT/btattach.log" 2>&1 &
echo $! > "$BTVM_STATE/btattach.pid"
poll 30 "the system bus" test -S /run/dbus/system_bus_socket || harness_fail "system dbus-daemon did not start"
poll 60 "$ADAPTER from btattach" test -e "/sys/class/bluetooth/$ADAPTER" || harness_fail "btattach gave no $ADAPTER"
log "system bus up, $ADAPTER attached"

# --- bluetoothd
start_bluetoothd 90 || harness_fail "bluetoothd did not bring up $ADAPTER"
ADDRESS=$(adapter_prop Address) || harness_fail "no adapter address"
write_shared "$ADDRESS_FILE" "$ADDRESS"
write_shared "$OUT/stage" bluetoothd-ready "$(uptime_s)"
log "address $ADDRESS published in $ADDRESS_FILE"

# --- the guest script
export PEER_NAME ADAPTER ADAPTER_PATH ADDRESS ADDRESS_FILE PEER_ADDRESS_FILE BTVM_LIB BTVM_DIR \
    BTVM_REPO BTVM_WAIT_TIMEOUT BTVM_BLUETOOTHD_ARGS
log "running $BTVM_GUEST_SCRIPT"
(cd "$OUT" && exec bash "$BTVM_GUEST_SCRIPT") < /dev/null
rc=$?
finish "$rc"
