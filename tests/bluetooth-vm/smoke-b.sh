#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# Smoke scenario, computer B (run by run-pair.sh inside VM b; see README.md). BlueZ's own tools only.
# B is discoverable and pairable with an auto-accepting agent (bluetoothctl, NoInputNoOutput), waits
# until A has paired with it, checks that it sees A as Paired too, restarts its bluetoothd, checks
# the pairing survived and becomes discoverable again under a new name for A to find.
# shellcheck source=guest-lib.sh
source "$BTVM_LIB"

btctl_start agent
btctl "agent NoInputNoOutput"
btctl_wait 'Agent registered' || fail "bluetoothctl did not register its agent"
btctl "default-agent"
btctl_wait 'Default agent request successful' || fail "default-agent failed"

set_adapter_prop Alias s smoke-b || fail "cannot set Alias"
set_adapter_prop PairableTimeout u 0 || fail "cannot set PairableTimeout"
set_adapter_prop Pairable b true || fail "cannot make $ADAPTER pairable"
set_adapter_prop DiscoverableTimeout u 0 || fail "cannot set DiscoverableTimeout"
set_adapter_prop Discoverable b true || fail "cannot make $ADAPTER discoverable"
wait_prop "$ADAPTER_PATH" org.bluez.Adapter1 Discoverable true 30 || fail "$ADAPTER not discoverable"
log "discoverable and pairable as smoke-b ($ADDRESS)"
barrier discoverable || fail "A did not come to the discoverable barrier"

a=$(peer_address) || fail "A never published its address"
btctl_accept_until 120 "A to pair" prop_is "$(device_path "$a")" org.bluez.Device1 Paired true \
    || { btctl_tail; fail "B never saw A ($a) as Paired"; }
log "B sees A ($a) with Paired=true"
barrier paired || fail "A did not come to the paired barrier"

# The agent belongs to the bluetoothd that is about to go: quit bluetoothctl first.
btctl_stop
restart_bluetoothd || fail "bluetoothd did not come back"
wait_prop "$(device_path "$a")" org.bluez.Device1 Paired true 30 || fail "the pairing with A did not survive the restart"
log "after the restart B still has A ($a) as Paired"
set_adapter_prop Alias s smoke-b-restarted || fail "cannot set Alias after the restart"
set_adapter_prop Discoverable b true || fail "cannot make $ADAPTER discoverable after the restart"
wait_prop "$ADAPTER_PATH" org.bluez.Adapter1 Discoverable true 30 || fail "$ADAPTER not discoverable after the restart"
barrier restarted || fail "A did not come to the restarted barrier"

barrier finished || fail "A did not finish"
log "PASS: smoke-b"
