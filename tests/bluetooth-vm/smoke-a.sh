#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# Smoke scenario, computer A (run by run-pair.sh inside VM a; see README.md). BlueZ's own tools only.
# A discovers B (B's address appears under org.bluez), pairs with it through bluetoothctl with a
# NoInputNoOutput agent, sees Paired=true; after B restarted its bluetoothd, A discovers B again and
# sees the name B took after the restart (so A sees B's adapter as run by the new bluetoothd).
# shellcheck source=guest-lib.sh
source "$BTVM_LIB"

btctl_start
btctl "agent NoInputNoOutput"
btctl_wait 'Agent registered' || fail "bluetoothctl did not register its agent"
btctl "default-agent"
btctl_wait 'Default agent request successful' || fail "default-agent failed"

barrier discoverable || fail "B did not become discoverable"
b=$(peer_address) || fail "B never published its address"
dev=$(device_path "$b")

t0=$(now)
btctl "scan on"
wait_device "$b" 60 || fail "discovery did not find B ($b)"
timing discovery "$t0"
wait_prop "$dev" org.bluez.Device1 Name smoke-b 30 || fail "B's name did not show up"
btctl "scan off"
log "found $dev ($(device_prop "$b" Name))"

t0=$(now)
btctl_mark
btctl "pair $b"
btctl_accept_until 90 "Paired=true on $dev" prop_is "$dev" org.bluez.Device1 Paired true \
    || { btctl_tail; fail "pairing with B failed"; }
timing pairing "$t0"
log "A sees B ($b) with Paired=true"
barrier paired || fail "B did not see the pairing"

barrier restarted 180 || fail "B did not restart its bluetoothd"
t0=$(now)
btctl "scan on"
wait_prop "$dev" org.bluez.Device1 Name smoke-b-restarted 60 || fail "A did not see B again after B's bluetoothd restart"
timing rediscovery_after_restart "$t0"
btctl "scan off"
[[ $(device_prop "$b" Paired) == true ]] || fail "A lost the pairing with B"
log "A sees B again after its restart (Name $(device_prop "$b" Name), Paired true)"

barrier finished || fail "B did not finish"
btctl_stop
log "PASS: smoke-a"
