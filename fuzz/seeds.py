#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/corpus/<target>/ (small, committed; fuzz/run.sh copies them).

The layouts are the ones described at the top of each fuzz/<target>.swift. Run from anywhere:
    python3 fuzz/seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    directory = os.path.join(HERE, "corpus", target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(bytes(data))


# --- frame-decoder ------------------------------------------------------------------------------

PREAMBLE = b"PVLK" + struct.pack(">HH", 6, 0)


def u16(v): return struct.pack(">H", v)
def u32(v): return struct.pack(">I", v)
def u64(v): return struct.pack(">Q", v)


ID = bytes(range(0x30, 0x40))
BODIES = {
    "hello": b"\x01" + ID + u32(3) + u16(4711) + u16(0) + u16(5) + b"Alice",
    "hello-empty-name": b"\x01" + ID + u32(1) + u16(0) + u16(9000) + u16(0),
    "text": b"\x02" + u64(7) + u64(6) + ID + u64(1_700_000_000_000) + "héllo ✓".encode(),
    "ack": b"\x03" + u64(7),
    "keepalive": b"\x04",
    "goodbye": b"\x05\x00",
    "pairing": b"\x06\x01",
    "pairing-asking": b"\x06\x02",
    "pairing-known": b"\x06\x03",
    "voice-start": b"\x07" + ID + b"\x14",
    "voice-stop": b"\x08",
    "voice-report": b"\x09\x0a",
    "voice": b"\x10" + u64(42) + u32(960 * 42) + bytes(range(40)),
}
PEER = b"abcdefghijklmnopqrstuvwxyz"
PEER2 = b"234567abcdefghijklmnopqrst"


def entry(source, peer, name, frame_ms=20, flags=0):
    return bytes([source, frame_ms, flags]) + peer + u16(len(name)) + name


CALL_BODIES = {
    "relayed-voice": b"\x11\x03" + u64(42) + u32(960 * 42) + bytes(range(40)),
    "participants": b"\x0b\x02" + entry(1, PEER, "Bob".encode(), flags=1) + entry(2, PEER2, "Dave’s phone".encode(), 10),
    "participants-empty": b"\x0b\x00",
    "relay-report": b"\x0c\x03\x0a\x01",
}
BODIES.update(CALL_BODIES)


def framed(body): return u32(len(body)) + body


def frame_decoder():
    t = "frame-decoder"
    stream = b"".join(framed(b) for b in BODIES.values())
    # flags, split seed (u16), maxBodyBytes override (u16), stream
    write(t, "stream-with-preamble", b"\x03" + u16(0x0105) + u16(0) + stream)
    write(t, "stream-no-preamble", b"\x00" + u16(0x0007) + u16(0) + stream)
    write(t, "stream-bodies", b"\x0b" + u16(0x2211) + u16(0) + stream)
    write(t, "preamble-split", b"\x01" + u16(0x0003) + u16(0) + PREAMBLE + framed(BODIES["keepalive"]))
    write(t, "preamble-bad-magic", b"\x01" + u16(2) + u16(0) + b"PVLX" + u16(4) + u16(0))
    write(t, "preamble-version-2", b"\x01" + u16(2) + u16(0) + b"PVLK" + u16(2) + u16(0))
    # Version negotiation (checkVersions): a preamble, then our and the peer's HELLO capabilities.
    ours = u32(7 << 16 | 0x30F)
    for name, low, high, theirs in [("6", 6, 0, 0x3), ("6-7", 6, 7, 7 << 16 | 0xF), ("7-9", 7, 9, 9 << 16 | 0x30F),
                                    ("8-9", 8, 9, 9 << 16 | 0x1), ("inverted", 7, 3, 0), ("5-7", 5, 7, 0),
                                    ("6-junk", 6, 0xABCD, 0xABCD << 16 | 3), ("altered", 6, 0, 7 << 16 | 3)]:
        write(t, "preamble-range-" + name, b"\x00" + u16(0) + u16(0) + b"PVLK" + u16(low) + u16(high) + ours + u32(theirs))
    write(t, "handshake-limit", b"\x07" + u16(9) + u16(0) + framed(b"\x21" + bytes(1100)))
    write(t, "max-body-override", b"\x20" + u16(1) + u16(8) + stream)
    write(t, "empty-frame", b"\x00" + u16(0) + u16(0) + u32(0))
    write(t, "too-large", b"\x00" + u16(0) + u16(0) + u32(70_001) + b"\x02")
    for name, body in BODIES.items():
        write(t, "body-" + name, b"\x00" + u16(0) + u16(0) + body)
        write(t, "datagram-" + name, b"\x00" + u16(0) + u16(0) + framed(body))
    # Large synthetic bodies (flags 0x50): a TEXT just around 65 536 bytes of text, any body near
    # the 70 000-byte limit. The fill repeats the input, so everything after the type is ASCII.
    text_head = b"\x02" + b"B" * 8 + b"A" * 8 + b"C" * 16 + b"D" * 8 + b"text"
    write(t, "big-text", b"\x50" + u16(0) + u16(4 << 2 | 0) + text_head)
    write(t, "big-text-over", b"\x50" + u16(0) + u16(5 << 2 | 0) + text_head)
    write(t, "big-body", b"\x50" + u16(0) + u16(4 << 2 | 1) + b"\x10" + b"V" * 12)


# --- handshake ----------------------------------------------------------------------------------

def record_ops():
    ops = b""
    ops += b"\x08a"                  # real sealer, 1-byte plaintext
    ops += b"\x10bc"                 # real sealer, 2 bytes
    ops += b"\x00"                   # real sealer, empty
    ops += b"\x03\x01"               # replay record 1
    ops += b"\x0a\x05"               # authentic at newest + 5
    ops += b"\x12" + u16(3)          # authentic at newest - 3
    ops += b"\x02" + u64(1 << 40)    # authentic at 2^40
    ops += b"\x1a\x00"               # authentic near 2^64
    ops += b"\x04\x00" + u16(9) + b"\x80"  # flip a bit of record 0
    ops += b"\x05\x02" + u16(10)     # record 2 truncated to 10 bytes
    ops += b"\x0d\x01\xff"           # record 1 with a byte appended
    ops += b"\x06" + u16(30) + bytes(range(30))  # forged bytes
    ops += b"\x1f"                   # a sealer with rekey limit 3
    return ops


def handshake():
    t = "handshake"
    # flags, identities/seed, payload lengths (u16 each)
    clean = b"\x00" * 5              # five messages delivered untouched
    head = lambda flags, ids=0x04, la=16, lb=32: bytes([flags, ids]) + u16(la) + u16(lb)
    write(t, "honest-initiator-link", head(0x02) + clean + b"\x00" + record_ops())
    write(t, "honest-responder-link", head(0x03) + clean + b"\x00" + record_ops())
    write(t, "honest-records-from-b", head(0x82, la=0, lb=959) + clean + b"\x00" + record_ops())
    sessions = bytes(range(1, 17)) + bytes(range(17, 33))
    write(t, "honest-voice-datagram", head(0x02) + clean + b"\x21" + sessions + record_ops())
    write(t, "honest-voice-window", head(0x02) + clean + b"\x61" + sessions + u16(100) + record_ops())
    write(t, "honest-voice-stream", head(0x03) + clean + b"\xa1" + sessions + record_ops())
    write(t, "honest-voice-bad-session", head(0x02) + clean + b"\x0b" + sessions + record_ops())
    write(t, "honest-pinned", head(0x16) + clean + b"\x00" + record_ops())
    write(t, "honest-wrong-pin-initiator", head(0x0a) + clean)
    write(t, "honest-wrong-pin-responder", head(0x0b) + clean)
    write(t, "honest-same-identity", head(0x02, ids=0x05) + clean + b"\x00" + record_ops())
    hello = lambda name: bytes(range(0x40, 0x50)) + b"\x03" + u16(4711) + u16(0) + name
    write(t, "honest-hello", bytes([0x42, 0x04]) + u16(5) + u16(3) + hello(b"Alice") + hello(b"Bob") + clean + b"\x00")
    write(t, "honest-payload-too-large", head(0x02, la=960) + clean)
    for k in range(5):
        tamper = b"\x00" * k + b"\x03" + u16(k * 7 + 1) + b"\x01"
        write(t, "honest-tamper-msg%d" % (k + 1), head(0x02) + tamper + b"\x00" * (4 - k))
    write(t, "honest-truncate-msg4", head(0x02) + b"\x00\x00\x00\x04" + u16(40) + b"\x00")
    write(t, "honest-replay-msg3", head(0x02) + b"\x00\x00\x07\x00\x00")
    write(t, "honest-duplicate-msg2", head(0x02) + b"\x00\x08\x00\x00\x00")
    write(t, "honest-duplicate-msg5", head(0x02) + b"\x00\x00\x00\x00\x08")
    base_point = b"\x09" + bytes(31)
    # raw mode: A alone; ops 0 natural step, 1 write, 2 read, 3 expected type + allowed size
    write(t, "raw-initiator", head(0x00) + b"\x00" + b"\x03" + base_point + b"\x00" + b"\x03" + bytes(64))
    write(t, "raw-initiator-low-order", head(0x00) + b"\x00\x03" + bytes(32))
    write(t, "raw-responder", head(0x01) + b"\x03" + bytes(range(32)) + b"\x00" + b"\x03" + base_point)
    write(t, "raw-out-of-turn", head(0x01) + b"\x01")
    write(t, "raw-read-anything", head(0x00) + b"\x02" + u16(33) + b"\x22" + base_point + b"\x00")
    write(t, "raw-records", head(0x00) + b"\x00" * 9 + u16(40) + bytes(40) + u16(10) + bytes(10))


# --- jitter-buffer ------------------------------------------------------------------------------

SEND = b"\x00"              # the next speech packet
def tick(ms_2_5=8, lead=4): return bytes([0x02 | ms_2_5 << 3, lead, 0])   # time passes, device pulls
LOSE = b"\x03"
HOLD = b"\x04"
RELEASE = b"\x05"
DTX = b"\x08\x01"           # a DTX packet (1 byte of payload)
DUPLICATE = b"\x07"
def dtx_gap(frames): return bytes([0x0f, frames])
def restart(seq, ts): return b"\x17" + u64(seq) + u32(ts)
RESET = b"\x27"
def stall(units_10ms): return b"\x2f" + u16(units_10ms)


def jitter(flags=0x01, config=bytes(10), seq=1000, ts=123456, clock=0):
    head = bytes([flags]) + config
    head += (bytes([seq & 0xFF]) if flags & 2 else u16(seq))
    head += (u16(ts) if flags & 4 else u32(ts))
    return head + u16(clock)


def jitter_buffer():
    t = "jitter-buffer"
    steady = (SEND + tick()) * 60
    write(t, "steady-20ms", jitter() + steady)
    write(t, "steady-10ms", jitter(config=b"\x02" + bytes(9)) + (SEND + tick(4)) * 80)
    write(t, "loss", jitter() + (SEND + tick() + SEND + tick() + LOSE + tick()) * 20)
    write(t, "reorder", jitter() + (HOLD + SEND + tick() + RELEASE + tick()) * 20)
    write(t, "duplicates", jitter() + (SEND + DUPLICATE + tick()) * 30)
    write(t, "dtx", jitter() + (SEND + tick()) * 20 + (DTX + tick()) * 5 + dtx_gap(20) + (SEND + tick()) * 20)
    write(t, "stall-burst", jitter() + (SEND + tick()) * 20 + b"\x3f" + u16(2000) + SEND * 15 + (SEND + tick()) * 20)
    write(t, "long-stall", jitter() + (SEND + tick()) * 20 + stall(300) + (SEND + tick()) * 20)
    write(t, "restart", jitter() + (SEND + tick()) * 20 + restart(5, 999) + (SEND + tick()) * 20)
    write(t, "reset", jitter() + (SEND + tick()) * 20 + RESET + (SEND + tick()) * 20)
    write(t, "wrap", jitter(flags=0x07, seq=30, ts=40) + (SEND + tick()) * 60)
    write(t, "late-clock", jitter(flags=0x09, clock=20000) + steady)
    write(t, "jittery", jitter() + (SEND + tick(3) + SEND + tick(13) + SEND + tick(0) + tick(16)) * 20)
    tuned = bytes([0x00, 0x0e, 40, 50, 0x25, 0x13, 0x21, 0x32, 0x43, 0x05])
    write(t, "tuned-config", jitter(flags=0x00, config=tuned) + (SEND + tick() + LOSE + SEND + tick()) * 20)
    fec = bytes([0x00, 0x00, 75, 100, 0x00, 0x00, 0xa5, 0xa5, 0x44, 0x02])
    write(t, "plan-for-fec", jitter(flags=0x00, config=fec) + (SEND + tick() + SEND + tick() + SEND + LOSE + tick()) * 25)
    write(t, "odd-frame", jitter(flags=0x00, config=b"\x3f\x07" + bytes(8)) + (SEND + tick(3)) * 40)


def txt(*entries):
    out = b"\x00"
    for e in entries:
        e = e.encode() if isinstance(e, str) else e
        out += bytes([min(len(e), 255)]) + (bytes([len(e) - 255]) if len(e) >= 255 else b"") + e
    return out


def resolved(proto, port, interface, address):
    return b"\x01" + bytes([proto & 0xff]) + u16(port) + bytes([len(interface)]) + interface.encode() + address.encode()


def lan_advertisement():
    t = "lan-advertisement"
    fp = "fp=" + "0123456789abcdef" * 4
    write(t, "full", txt("pv=1", "n=Ana's laptop", "c=text,voice", fp))
    write(t, "reordered", txt(fp, "c=voice", "n=Café ☕", "pv=1"))
    write(t, "bare", txt("pv=1"))
    write(t, "unknown-keys", txt("pv=1", "future=x", "flag", "C=text,video"))
    write(t, "duplicate", txt("pv=1", "n=a", "N=b"))
    write(t, "version-2", txt("pv=2", "n=x"))
    write(t, "long-entry", txt("pv=1", "n=" + "x" * 300))
    write(t, "bad-utf8", txt("pv=1", b"n=\xc3\x28"))
    write(t, "ipv4", resolved(0, 47800, "eth0", "192.168.1.20"))
    write(t, "ipv6-link-local", resolved(1, 47800, "eth0", "fe80::1"))
    write(t, "ipv6-global", resolved(1, 47800, "", "2001:db8::7"))
    write(t, "ipv6-no-zone", resolved(1, 47800, "", "fe80::1"))
    # An interface name Linux allows that is not letters and digits: the route must still parse.
    write(t, "ipv6-odd-interface", resolved(1, 47800, "e=h0", "fe80::1"))


# --- call-frames --------------------------------------------------------------------------------

def call_frames():
    t = "call-frames"
    for mode, name in [(0, "relayed-voice"), (1, "participants"), (1, "participants-empty"), (2, "relay-report")]:
        write(t, name, bytes([mode]) + CALL_BODIES[name][1:])
    write(t, "participants-duplicate-source", b"\x01\x02" + entry(1, PEER, b"a") + entry(1, PEER2, b"b"))
    write(t, "participants-uppercase-id", b"\x01\x01" + entry(1, PEER.upper(), b"a"))
    # Built through the API: (source, frameMs, flags, id seed, name length / 2, name).
    write(t, "built", b"\x03" + b"\x01\x14\x01\x05\x02Anna" + b"\x02\x0a\x00\x09\x01Bo" + b"\x03\x1e\x00\x00\x00")


# --- channel-frames -----------------------------------------------------------------------------

def channel_frames():
    t = "channel-frames"
    name = b"org.example.Chess"
    bodies = {
        "open": b"\x30" + u32(1) + b"\x01" + u32(262144) + u16(0) + bytes([len(name)]) + name,
        "open-datagrams": b"\x30" + u32(3) + b"\x03" + u32(0) + u16(47801) + bytes([len(name)]) + name,
        "accept": b"\x31" + u32(1) + u32(262144) + u16(0),
        "refuse": b"\x32" + u32(1) + b"\x01",
        "data-end-of-message": b"\x33" + u32(1) + b"\x01" + u32(123456) + b"hello",
        "window": b"\x34" + u32(2) + u32(65536),
        "close": b"\x35" + u32(3),
        "reset": b"\x36" + u32(4) + b"\x01",
        "datagram": b"\x37" + u32(5) + b"\x00" * 40,
        "feedback": b"\x38" + u32(0) + u32(1 << 20) + u32(4000),
    }
    for label, body in bodies.items():
        write(t, label, b"\x00" + body)
    # Scripts (first byte odd): open a stream and accept, send 1000 bytes, take them, close both ways.
    write(t, "script-stream", b"\x01" + b"\x00\x00" + b"\x01" + u16(1000) + b"\x00" + b"\x02" + u16(1000) + b"\x00"
          + b"\x03\x00\x00" + b"\x03\x01\x00")
    # A messages stream, two fragments, then raw DATA beyond the window from the peer.
    write(t, "script-messages-raw", b"\x01" + b"\x00\x01" + b"\x01" + u16(301) + b"\x00" + b"\x06"
          + b"\x05" + u16(15) + b"\x33" + u32(1) + b"\x00" + u32(0) + b"xxxxx")
    # A datagram stream, a datagram, a reset from B.
    write(t, "script-datagrams", b"\x01" + b"\x00\x02" + b"\x07\x00\x10" + b"\x04\x01\x00")


# --- dial-proof ---------------------------------------------------------------------------------

def dial_proof():
    t = "dial-proof"
    clock = u64(1_764_580_000)
    # Honest dials while hidden: with the current secret (then its replay), an older one, none.
    write(t, "current-then-replay", bytes([0b0001_0100, 7]) + clock + b"\x00" + b"\x08")
    write(t, "older-accepted", bytes([0b0010_0100, 7]) + clock + b"\x00")
    write(t, "no-secret", bytes([0b0011_0000, 7]) + clock + b"\x00")
    # Two epochs off, then one epoch later a replay of an accepted one.
    write(t, "epoch-offsets", bytes([0b0001_0000, 7]) + clock + b"\x02" + b"\x03\xff" + b"\x03\x00" + b"\xf8")
    # Raw message 1s: well-formed with a zero proof, too short, the old 33-byte layout; discoverable.
    write(t, "raw", bytes([0, 7]) + clock + b"\x00" + u16(49) + b"\x21" + bytes(48) + b"\x00" + u16(33) + b"\x21" + bytes(32))
    write(t, "raw-open", bytes([1, 7]) + clock + b"\x00" + u16(49) + b"\x21" + bytes(48))
    write(t, "old-version", bytes([0b0001_0010, 7]) + clock + b"\x00" + b"\x00" + u16(33) + b"\x21" + bytes(32))


# --- mumble-control -----------------------------------------------------------------------------

def mumble_control():
    t = "mumble-control"

    def msg(kind, body): return u16(kind) + u32(len(body)) + body

    login = (msg(0, b"\x08\x84\x86\x04")  # Version 1.3.4
             + msg(7, b"\x08\x00\x1a\x04Root") + msg(7, b"\x08\x04\x10\x00\x1a\x05Games")
             + msg(9, b"\x08\x01\x1a\x02me\x28\x04") + msg(9, b"\x08\x02\x1a\x03bob\x28\x04\x48\x01")
             + msg(5, b"\x08\x01\x1a\x05hello") + msg(21, b"\x08\x00\x10\x00\x18\x01\x20\x01"))
    write(t, "login", b"\x07" + login)
    write(t, "text-and-voice", b"\x03" + msg(11, b"\x08\x02\x1a\x02\x00\x04\x2a\x02hi")
          + msg(1, b"\x80\x02\x81\x2c\xa0\x02\xaa\xbb") + msg(8, b"\x08\x02\x1a\x03bye"))
    write(t, "reject", b"\x00" + msg(4, b"\x08\x04\x12\x17Invalid server password"))
    write(t, "too-long", b"\x01" + u16(7) + u32(0x800000))
    # The UDP key and nonces as murmurd sends them after the login, then a resync request (empty).
    write(t, "crypt-setup", b"\x05" + msg(15, b"\x0a\x10" + bytes(range(16)) + b"\x12\x10" + b"\xc1" * 16
                                            + b"\x1a\x10" + b"\x5e" * 16) + msg(15, b""))
    # Names past their 512-byte bound: 600 bytes of "é", and 200 invalid bytes (600 once replaced).
    write(t, "long-names", b"\x00" + msg(9, b"\x08\x01\x1a\xd8\x04" + "é".encode() * 300)
          + msg(7, b"\x08\x04\x1a\xc8\x01" + b"\xff" * 200))
    # Our own registration coming back: UserState with user_id, and a PermissionDenied with its reason.
    write(t, "register", b"\x02" + msg(9, b"\x08\x01\x20\x02") + msg(12, b"\x22\x0bNot allowed\x28\x01"))


# --- transfer-messages --------------------------------------------------------------------------

def tmsg(body): return u32(len(body)) + body


def tentry(kind, path, size): return bytes([kind]) + u16(len(path)) + path + u64(size)


def transfer_messages():
    t = "transfer-messages"
    tid = bytes(range(16))
    offer = tmsg(b"\x01" + tid + u32(3) + tentry(0, b"a.txt", 5) + tentry(1, b"d", 0) + tentry(0, "d/é".encode(), 3))
    data = tmsg(b"\x02hello") + tmsg(b"\x04" + u32(0) + b"\x11" * 32) + tmsg(b"\x03" + u64(3)) + tmsg(b"\x04" + u32(1) + b"\x22" * 32)
    # Mode 0: the decoder, cut every 3 bytes.
    write(t, "decode-all", b"\x00\x02" + offer + data + tmsg(b"\x20\x03no space"))
    # Mode 1: a receiver accepting from the start, then more bytes than announced.
    write(t, "receive", b"\x01" + u32(0) + offer + data)
    write(t, "receive-too-many", b"\x01" + u32(0) + offer + tmsg(b"\x02hello!"))
    write(t, "receive-dot-dot", b"\x01" + u32(0) + tmsg(b"\x01" + tid + u32(1) + tentry(0, b"../x", 1)))
    # Mode 2: a sender told to start in the middle, then told it is complete.
    write(t, "send", b"\x02" + tmsg(b"\x10" + u32(0) + u64(2)) + tmsg(b"\x11"))
    write(t, "send-outside", b"\x02" + tmsg(b"\x10" + u32(9) + u64(0)))


if __name__ == "__main__":
    frame_decoder()
    handshake()
    jitter_buffer()
    lan_advertisement()
    call_frames()
    channel_frames()
    dial_proof()
    mumble_control()
    transfer_messages()
