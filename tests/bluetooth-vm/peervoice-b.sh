#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# PeerVoice over real BlueZ, computer B (run by run-pair.sh inside VM b; `make test-bluetooth`).
# B's person always says yes (every PairingRequested is confirmed) until the last part, where the
# answer is no. B discovers (so it is discoverable), sees A connect, answers A's message, takes
# A's app stream (peervoicectl listen) beside a text, sees A disconnect, connect again after A's bluetoothd restart and disconnect again; then forgets A
# and refuses A's next pairing.
# shellcheck source=guest-lib.sh
source "$BTVM_LIB"
# shellcheck source=peervoice-lib.sh
source "$BTVM_DIR/peervoice-lib.sh"

pv_start pv-b
a=$(peer_address) || fail "A never published its address"
pv_auto_confirm
pv StartDiscovery > /dev/null || fail "StartDiscovery failed"
[[ $(adapter_prop Discoverable) == true && $(adapter_prop Pairable) == true ]] \
    || fail "StartDiscovery did not make $ADAPTER discoverable and pairable"
barrier pv-ready || fail "A's peervoiced did not start"

# --- A pairs and connects
pv_wait PairingRequested "'$a'" 90 || { pv_dump; fail "no PairingRequested for A"; }
aid=$(pv_identified "$a" 90) || { pv_dump; fail "no PeerIdentified for $a"; }
pv_wait PeerStateChanged "'$aid', 'connected'" 90 || { pv_dump; fail "A never connected"; }
[[ $(device_prop "$a" Trusted) == true ]] || fail "A is not Trusted after the accepted pairing"
barrier connected-1 || fail "A did not see the connection"
pv_wait VoiceStateChanged "'$aid', 'active'" 150 || { pv_dump; fail "voice with A did not become active"; }

pv_wait MessageReceived "'$aid', '[0-9a-f]{32}', 'hello from A'" 200 || { pv_dump; fail "no message from A"; }
pv Send "$a" "hello from B" > /dev/null || fail "Send to A failed"
pv_wait MessageDelivered "'$aid'" 90 || { pv_dump; fail "no MessageDelivered from A"; }

# --- A's app stream, beside a text
"$PV_CTL" listen org.example.VMTest --once > "$OUT/stream-received" 2> "$OUT/stream-listen.err" &
listen_pid=$!
pv_wait_log 'registered org.example.VMTest' 30 || fail "peervoicectl listen did not register: $(cat "$OUT/stream-listen.err")"
barrier stream-listening || fail "A did not get ready for the stream"
pv_wait MessageReceived "'$aid', '[0-9a-f]{32}', 'text beside the stream'" 120 || { pv_dump; fail "no text beside the stream"; }
wait "$listen_pid" || { pv_dump; fail "peervoicectl listen failed: $(cat "$OUT/stream-listen.err")"; }
barrier stream-done || fail "A did not finish the stream"

pv_mark
# In the TCG guests A's goodbye once came more than 30 s after A's Disconnect (the link had
# stalled for 4 s during the texts and been redialled; A saw its own side close at once): 90 s.
pv_wait PeerStateChanged "'$aid', 'disconnected'" 90 || { pv_dump; fail "A's Disconnect not seen"; }
barrier disconnected-1 || fail "A did not see the disconnection"
read -r sent received <<<"$(pv_voice_counts "$aid")"
log "voice with A over RFCOMM: sent ${sent:-?} packets, received ${received:-?}"
(( ${received:-0} >= 1 )) || { pv_dump; fail "no voice packets from A over RFCOMM"; }

# --- A's bluetoothd restarts; A connects again (already paired: no prompt)
pv_wait PeerStateChanged "'$aid', 'connected'" 90 || { pv_dump; fail "A did not connect again"; }
barrier connected-2 || fail "A did not see the second connection"
pv_wait MessageReceived "'$aid', '[0-9a-f]{32}', 'after the restart'" 90 || { pv_dump; fail "no message after A's restart"; }
pv Send "$a" "B got it" > /dev/null || fail "Send after A's restart failed"
pv_mark
pv_wait PeerStateChanged "'$aid', 'disconnected'" 90 || { pv_dump; fail "A's second Disconnect not seen"; }
barrier disconnected-2 || fail "A did not see the second disconnection"

# --- forget A; its next pairing is refused
write_shared "$OUT/pairing-answer" false
pv_mark
pv RemovePeer "$a" > /dev/null || fail "RemovePeer failed"
pv_remove_device "$a" || fail "RemoveDevice($a) failed"
barrier forgotten || fail "A did not forget B"
pv_wait PairingRequested "'$a'" 120 || { pv_dump; fail "no PairingRequested for A the second time"; }
pv_wait PeerStateChanged "'$a', 'disconnected'" 30 || { pv_dump; fail "A not disconnected after the refusal"; }
[[ $(device_prop "$a" Paired 2>/dev/null) != true ]] || fail "A is paired although B refused"

barrier finished 180 || fail "A did not finish"
log "PASS: peervoice-b"
