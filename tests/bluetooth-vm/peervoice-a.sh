#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# PeerVoice over real BlueZ, computer A (run by run-pair.sh inside VM a; `make test-bluetooth`).
# A discovers B, connects (pairing: A's person confirms the code, B's auto-confirms), both are
# connected, voice comes up by itself on the RFCOMM channel (VOICE frames both ways), text goes
# both ways, an app stream (peervoicectl open, 128 KiB) goes to B over the same RFCOMM channel
# while a text does, A disconnects; then A's bluetoothd is killed and restarted, A's
# peervoiced registers again and A connects to B once more and messages flow; finally, with the
# pairing forgotten on both sides and B's person saying no, A's Connect fails with Rejected.
# shellcheck source=guest-lib.sh
source "$BTVM_LIB"
# shellcheck source=peervoice-lib.sh
source "$BTVM_DIR/peervoice-lib.sh"

pv_start pv-a
b=$(peer_address) || fail "B never published its address"
barrier pv-ready || fail "B's peervoiced did not start"

# --- discovery
pv_mark
t0=$(now)
pv StartDiscovery > /dev/null || fail "StartDiscovery failed"
pv_property_is Discovering true || fail "Discovering is not true after StartDiscovery"
pv_wait PeerFound "'$b', '" 60 || { pv_dump; fail "no PeerFound for B ($b)"; }
timing discovery "$t0"
pv StopDiscovery > /dev/null || fail "StopDiscovery failed"
pv_property_is Discovering false || fail "Discovering is not false after StopDiscovery"

# --- first connection: pairing, confirmed here (and by B's auto-confirm)
pv_mark
t0=$(now)
pv_connect "$b" > "$OUT/connect-1.out" &
connect_pid=$!
pv_wait PairingRequested "'$b', '[^']*', '[0-9]{6}'" 60 || { pv_dump; fail "no PairingRequested for B"; }
pv_wait PeerStateChanged "'$b', 'pairing'" 5 || fail "no PeerStateChanged pairing"
timing pairing_prompt "$t0"
# BlueZ's pairing prompt, then (first contact) the peer link's own code: this person says yes.
prompts=$(pv_confirm_until_done "$connect_pid" "$b")
wait "$connect_pid" || { pv_dump; fail "Connect($b) failed: $(cat "$OUT/connect-1.out")"; }
log "Connect($b) done after $prompts confirmed prompt(s)"
# Once its key is known, B is its id; Connect answered with it.
bid=$(pv_identified "$b" 5) || { pv_dump; fail "no PeerIdentified for $b"; }
grep -q "('$bid',)" "$OUT/connect-1.out" || fail "Connect did not answer with B's id $bid: $(cat "$OUT/connect-1.out")"
pv_wait PeerStateChanged "'$bid', 'connected'" 10 || { pv_dump; fail "B is not connected"; }
timing connect_with_pairing "$t0"
[[ $(device_prop "$b" Trusted) == true ]] || fail "B is not Trusted after the accepted pairing"
pv ListPeers | grep -q "'$bid', 'pv-b', 'bluetooth', 'connected'" || fail "ListPeers: $(pv ListPeers)"
barrier connected-1 || fail "B did not see the connection"

# --- voice: on by itself after connecting; `active` once both streams run and B's frames arrive
# here over the channel
t0=$(now)
# In the TCG guest voice takes 6-54 s to come up over RFCOMM (both PipeWire streams and the first
# frames through the one emulated CPU); over IP on the host it takes well under a second.
pv_wait VoiceStateChanged "'$bid', 'active'" 150 || { pv_dump; fail "voice with B did not become active"; }
timing voice_active "$t0"

# --- messages both ways
t0=$(now)
# The first text right after voice starts: in the TCG guest the voice pipeline can keep the one
# emulated CPU busy for a while (once 30 s until voice was active), and the link shares it.
pv Send "$b" "hello from A" > /dev/null || fail "Send to B failed"
pv_wait MessageDelivered "'$bid'" 90 || { pv_dump; fail "no MessageDelivered from B"; }
pv_wait MessageReceived "'$bid', '[0-9a-f]{32}', 'hello from B'" 90 || { pv_dump; fail "no message from B"; }
timing messages_both_ways "$t0"

# --- an app stream over the RFCOMM channel, beside text (and voice, which still runs)
barrier stream-listening || fail "B's app did not register its channel"
head -c 131072 /dev/urandom > "$OUT/stream.bin"
pv_mark
t0=$(now)
"$PV_CTL" open "$bid" org.example.VMTest < "$OUT/stream.bin" > /dev/null 2> "$OUT/stream-open.err" &
open_pid=$!
pv Send "$b" "text beside the stream" > /dev/null || fail "Send beside the stream failed"
wait "$open_pid" || { pv_dump; fail "peervoicectl open failed: $(cat "$OUT/stream-open.err")"; }
pv_wait MessageDelivered "'$bid'" 90 || { pv_dump; fail "the text beside the stream was not delivered"; }
timing stream_beside_text "$t0"
barrier stream-done || fail "B did not finish the stream"
cmp -s "$OUT/stream.bin" "$SHARED/b/stream-received" || fail "the stream arrived different ($(stat -c %s "$SHARED/b/stream-received") bytes)"
log "128 KiB over RFCOMM beside a text: equal at B"

# --- disconnect
pv_mark
t0=$(now)
pv Disconnect "$b" > /dev/null || fail "Disconnect failed"
pv_wait PeerStateChanged "'$bid', 'disconnected'" 10 || fail "B not disconnected here"
barrier disconnected-1 || fail "B did not see the disconnection"
timing disconnect "$t0"
read -r sent received <<<"$(pv_voice_counts "$bid")"
log "voice with B over RFCOMM: sent ${sent:-?} packets, received ${received:-?}"
(( ${received:-0} >= 1 )) || { pv_dump; fail "no voice packets from B over RFCOMM"; }

# --- bluetoothd dies and comes back: peervoiced registers again and connects without pairing
t0=$(now)
restart_bluetoothd --kill || fail "bluetoothd did not come back"
pv_wait_log 're-registered the PeerVoice profile' 30 || { pv_dump; fail "peervoiced did not re-register with BlueZ"; }
poll 30 "Adapter $ADAPTER again" pv_property_is Adapter "'$ADAPTER'" || fail "Adapter did not come back"
timing reregistered_after_restart "$t0"
pv_mark
t0=$(now)
out=$(pv_connect "$b") || { pv_dump; fail "Connect($b) after the restart failed: $out"; }
pv_wait PeerStateChanged "'$bid', 'connected'" 10 || fail "B not connected after the restart"
timing reconnect_after_restart "$t0"
barrier connected-2 || fail "B did not see the second connection"
pv Send "$b" "after the restart" > /dev/null || fail "Send after the restart failed"
pv_wait MessageReceived "'$bid', '[0-9a-f]{32}', 'B got it'" 90 || { pv_dump; fail "no answer from B after the restart"; }
pv_mark
pv Disconnect "$b" > /dev/null || fail "second Disconnect failed"
pv_wait PeerStateChanged "'$bid', 'disconnected'" 10 || fail "B not disconnected after the second Disconnect"
barrier disconnected-2 || fail "B did not see the second disconnection"

# --- rejection: both forget the pairing, B's person says no
pv RemovePeer "$b" > /dev/null || fail "RemovePeer failed"
pv_remove_device "$b" || fail "RemoveDevice($b) failed"
barrier forgotten || fail "B did not forget A"
pv_mark
pv StartDiscovery > /dev/null || fail "second StartDiscovery failed"
pv_wait PeerFound "'$b'" 60 || { pv_dump; fail "B not found again"; }
pv StopDiscovery > /dev/null
pv_mark
t0=$(now)
pv_connect "$b" > "$OUT/connect-3.out" &
connect_pid=$!
pv_wait PairingRequested "'$b'" 60 || { pv_dump; fail "no PairingRequested for B the second time"; }
pv_confirm_until_done "$connect_pid" "$b" > /dev/null
if wait "$connect_pid"; then
    fail "Connect($b) succeeded although B refused: $(cat "$OUT/connect-3.out")"
fi
grep -q 'org.example.PeerVoice.Error.Rejected' "$OUT/connect-3.out" \
    || { pv_dump; fail "Connect failed, but not with Rejected: $(cat "$OUT/connect-3.out")"; }
timing rejected "$t0"
log "Connect after B refused: $(cat "$OUT/connect-3.out")"
pv_wait PeerStateChanged "'$b', 'disconnected'" 10 || fail "B not disconnected after the refusal"

barrier finished || fail "B did not finish"
log "PASS: peervoice-a"
