#!/usr/bin/python3
"""A PeerVoice prober written from docs/PROTOCOL.md and docs/SECURITY.md alone, as a second
implementation would be: it dials a listener, speaks the preamble and the key exchange as an
initiator, and reports every byte the listener sent, how the stream ended and when.

It uses only Python's hashlib (BLAKE2b) and the `cryptography` package (X25519, ChaCha20-Poly1305;
HChaCha20 is written out below for XChaCha20-Poly1305), never PeerVoice's code.

    pvprobe.py HOST PORT [options]     one dial; prints a JSON report on stdout
    pvprobe.py --vectors               checks the test vectors of docs/SECURITY.md §8 and §3.4

Options:
    --seed TEXT       derives the ephemeral key and the random proof from TEXT, so that two runs
                      send the same bytes (default: fresh randomness)
    --secret HEX      the listener's presence secret: message 1 carries a real dial proof
    --epoch-offset N  prove for the epoch N away from this clock's (default 0)
    --version N       the version this side's preamble announces (default 8)
    --message1 HEX    send these bytes as message 1 (a replay); message 3 is then HEX's key if
                      --reveal HEX gives it
    --reveal HEX      the ephemeral public key to reveal in message 3 (with --message1)
    --raw HEX         send these bytes instead of a preamble and message 1 (not PeerVoice at all)
    --timeout S       give up waiting after S seconds (default 15)

The report: "received" (hex of every byte received, in order), "ending" ("closed", "reset",
"timeout", or "hung up" once message 4 came), "closed_after_ms" (from the last byte this side sent to the end), "message1" (hex),
"answered" (message 2 came), "static_key" and "hello" (what message 4 revealed, if it came).
"""
import argparse
import hashlib
import json
import os
import socket
import struct
import sys
import time

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives import serialization

PROTOCOL_NAME = b"PeerVoice_v2_XXcommit_25519_XChaChaPoly_BLAKE2b"
PROOF_VERSION = 8          # PROTOCOL.md §3: the version whose message 1 carries the dial proof
PROOF_BYTES = 16
EPOCH_SECONDS = 900


def H(data):
    return hashlib.blake2b(data, digest_size=32).digest()


def HK(key, data):
    return hashlib.blake2b(data, key=key, digest_size=32).digest()


def KDF(ck, ikm, n):
    prk = HK(ck, ikm)
    out, previous = [], b""
    for i in range(1, n + 1):
        previous = HK(prk, previous + bytes([i]))
        out.append(previous)
    return out


def _rotl(v, c):
    return ((v << c) & 0xFFFFFFFF) | (v >> (32 - c))


def _quarter(s, a, b, c, d):
    s[a] = (s[a] + s[b]) & 0xFFFFFFFF; s[d] = _rotl(s[d] ^ s[a], 16)
    s[c] = (s[c] + s[d]) & 0xFFFFFFFF; s[b] = _rotl(s[b] ^ s[c], 12)
    s[a] = (s[a] + s[b]) & 0xFFFFFFFF; s[d] = _rotl(s[d] ^ s[a], 8)
    s[c] = (s[c] + s[d]) & 0xFFFFFFFF; s[b] = _rotl(s[b] ^ s[c], 7)


def hchacha20(key, nonce16):
    s = list(struct.unpack("<4I", b"expand 32-byte k")) + list(struct.unpack("<8I", key)) + list(struct.unpack("<4I", nonce16))
    for _ in range(10):
        _quarter(s, 0, 4, 8, 12); _quarter(s, 1, 5, 9, 13); _quarter(s, 2, 6, 10, 14); _quarter(s, 3, 7, 11, 15)
        _quarter(s, 0, 5, 10, 15); _quarter(s, 1, 6, 11, 12); _quarter(s, 2, 7, 8, 13); _quarter(s, 3, 4, 9, 14)
    return struct.pack("<8I", *(s[0:4] + s[12:16]))


def xchacha_seal(key, nonce24, plaintext, ad):
    return ChaCha20Poly1305(hchacha20(key, nonce24[:16])).encrypt(b"\0" * 4 + nonce24[16:], plaintext, ad)


def xchacha_open(key, nonce24, ciphertext, ad):
    return ChaCha20Poly1305(hchacha20(key, nonce24[:16])).decrypt(b"\0" * 4 + nonce24[16:], ciphertext, ad)


def public(private):
    return private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def dh(private, public_bytes):
    shared = private.exchange(X25519PublicKey.from_public_bytes(public_bytes))
    if shared == b"\0" * 32:
        raise ValueError("low-order point")
    return shared


class Symmetric:
    """SECURITY.md §3.1: ck, h, k, n."""

    def __init__(self):
        self.h = H(PROTOCOL_NAME)
        self.ck = self.h
        self.k = None
        self.n = 0

    def mix_hash(self, data):
        self.h = H(self.h + data)

    def mix_key(self, ikm):
        self.ck, self.k = KDF(self.ck, ikm, 2)
        self.n = 0

    def _nonce(self):
        return b"\0" * 16 + struct.pack(">Q", self.n)

    def encrypt_and_hash(self, plaintext):
        c = xchacha_seal(self.k, self._nonce(), plaintext, self.h)
        self.n += 1
        self.mix_hash(c)
        return c

    def decrypt_and_hash(self, ciphertext):
        p = xchacha_open(self.k, self._nonce(), ciphertext, self.h)
        self.n += 1
        self.mix_hash(ciphertext)
        return p


def commitment(e_pub):
    return H(b"PeerVoice v2 commit" + e_pub)


def dial_proof(secret, epoch, c):
    """SECURITY.md §3.4."""
    return HK(secret, b"PeerVoice dial proof" + struct.pack(">Q", epoch) + c)[:PROOF_BYTES]


def preamble(version):
    return b"PVLK" + struct.pack(">HH", version, 0)


def frame(body):
    return struct.pack(">I", len(body)) + body


class Initiator:
    """The initiator's side of SECURITY.md §3.2, message by message."""

    def __init__(self, static_private, ephemeral_private, payload, proof_field):
        self.s = static_private
        self.e = ephemeral_private
        self.payload = payload
        self.proof_field = proof_field  # None: the version has none; else bytes or a function of c
        self.sym = Symmetric()

    def message1(self):
        c = commitment(public(self.e))
        self.sym.mix_hash(b"\x21")
        self.sym.mix_hash(c)
        body = b"\x21" + c
        if self.proof_field is not None:
            proof = self.proof_field(c) if callable(self.proof_field) else self.proof_field
            self.sym.mix_hash(proof)
            body += proof
        return body

    def read_message2(self, body):
        assert body[0] == 0x22 and len(body) == 33, "message 2"
        self.e_r = body[1:]
        self.ee = dh(self.e, self.e_r)
        self.sym.mix_hash(b"\x22")
        self.sym.mix_hash(self.e_r)

    def message3(self):
        self.sym.mix_hash(b"\x23")
        self.sym.mix_hash(public(self.e))
        self.h3 = self.sym.h
        self.sym.mix_key(self.ee)
        return b"\x23" + public(self.e)

    def read_message4(self, body):
        assert body[0] == 0x24 and len(body) >= 65, "message 4"
        self.sym.mix_hash(b"\x24")
        self.s_r = self.sym.decrypt_and_hash(body[1:49])
        self.sym.mix_key(dh(self.e, self.s_r))
        self.payload_r = self.sym.decrypt_and_hash(body[49:])

    def message5(self):
        self.sym.mix_hash(b"\x25")
        c1 = self.sym.encrypt_and_hash(public(self.s))
        self.sym.mix_key(dh(self.s, self.e_r))
        c2 = self.sym.encrypt_and_hash(self.payload)
        return b"\x25" + c1 + c2

    def code(self):
        digest = H(b"PeerVoice v2 code" + self.h3)
        return "%06d" % (int.from_bytes(digest[:8], "big") % 1_000_000)


def parse_hello(body):
    """PROTOCOL.md §5.1."""
    if len(body) < 27 or body[0] != 0x01:
        return None
    name_length = struct.unpack(">H", body[25:27])[0]
    return {
        "instance": body[1:17].hex(),
        "capabilities": struct.unpack(">I", body[17:21])[0],
        "listen_port": struct.unpack(">H", body[21:23])[0],
        "voice_port": struct.unpack(">H", body[23:25])[0],
        "name": body[27:27 + name_length].decode("utf-8", "replace"),
    }


class Stream:
    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.received = b""
        self.pending = b""
        self.ending = None
        self.deadline = time.monotonic() + timeout
        self.last_sent = time.monotonic()
        self.ended_at = None

    def send(self, data):
        self.sock.sendall(data)
        self.last_sent = time.monotonic()

    def _fill(self):
        if self.ending:
            return False
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.ending = "timeout"
            return False
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            self.ending = "timeout"
            return False
        except ConnectionResetError:
            data, self.ending = b"", "reset"
        if not data:
            self.ending = self.ending or "closed"
            self.ended_at = time.monotonic()
            return False
        self.received += data
        self.pending += data
        return True

    def take(self, count):
        while len(self.pending) < count:
            if not self._fill():
                return None
        data, self.pending = self.pending[:count], self.pending[count:]
        return data

    def frame(self):
        length = self.take(4)
        if length is None:
            return None
        return self.take(struct.unpack(">I", length)[0])

    def until_end(self):
        while self._fill():
            pass


def probe(args):
    rng = (lambda n, label: hashlib.blake2b(args.seed.encode() + label, digest_size=n).digest()) if args.seed else (lambda n, label: os.urandom(n))
    static = X25519PrivateKey.from_private_bytes(rng(32, b"static"))
    ephemeral = X25519PrivateKey.from_private_bytes(rng(32, b"ephemeral"))
    hello = b"\x01" + rng(16, b"instance") + struct.pack(">IHHH", 1, 0, 0, 5) + b"probe"
    epoch = int(time.time()) // EPOCH_SECONDS + args.epoch_offset
    if args.version < PROOF_VERSION:
        proof_field = None
    elif args.secret:
        proof_field = lambda c: dial_proof(bytes.fromhex(args.secret), epoch, c)
    else:
        proof_field = rng(PROOF_BYTES, b"proof")
    initiator = Initiator(static, ephemeral, hello, proof_field)
    report = {"answered": False, "static_key": None, "hello": None}
    stream = Stream(args.host, args.port, args.timeout)
    try:
        if args.raw:
            stream.send(bytes.fromhex(args.raw))
        else:
            stream.send(preamble(args.version))
            # PROTOCOL.md §7.1: message 1 only after the responder's preamble (it fixes the version).
            theirs = stream.take(8)
            if theirs is not None and theirs[:4] == b"PVLK":
                message1 = bytes.fromhex(args.message1) if args.message1 else initiator.message1()
                report["message1"] = message1.hex()
                stream.send(frame(message1))
                message2 = stream.frame()
                if message2 is not None:
                    report["answered"] = True
                    if args.message1:
                        # A replayer knows the public key it saw in message 3, not the secret.
                        if args.reveal:
                            stream.send(frame(b"\x23" + bytes.fromhex(args.reveal)))
                    else:
                        initiator.read_message2(message2)
                        stream.send(frame(initiator.message3()))
                        message4 = stream.frame()
                        if message4 is not None:
                            initiator.read_message4(message4)
                            report["static_key"] = initiator.s_r.hex()
                            report["hello"] = parse_hello(initiator.payload_r)
                            report["code"] = initiator.code()
                            # All it wanted: it hangs up rather than wait out the key exchange's limit.
                            stream.ending = "hung up"
        stream.until_end()
    finally:
        stream.sock.close()
    report["received"] = stream.received.hex()
    report["ending"] = stream.ending
    report["closed_after_ms"] = round((stream.ended_at - stream.last_sent) * 1000, 1) if stream.ended_at else None
    return report


# SECURITY.md §8 and §3.4, computed here from the document.
VECTOR_KEYS = {name: bytes(range(start, start + 32)) for name, start in
               (("s_i", 0x00), ("s_r", 0x20), ("e_i", 0x40), ("e_r", 0x60))}


def vector_messages(proof_secret=None, epoch=None):
    """Both sides of the test vector's handshake; returns message hex strings and the code."""
    keys = {name: X25519PrivateKey.from_private_bytes(value) for name, value in VECTOR_KEYS.items()}
    field = (lambda c: dial_proof(proof_secret, epoch, c)) if proof_secret else None
    i = Initiator(keys["s_i"], keys["e_i"], b"alice", field)
    m1 = i.message1()
    # The responder's side, written out.
    r = Symmetric()
    r.mix_hash(b"\x21"); r.mix_hash(m1[1:33])
    if field:
        r.mix_hash(m1[33:])
    e_r = public(keys["e_r"])
    r.mix_hash(b"\x22"); r.mix_hash(e_r)
    m2 = b"\x22" + e_r
    i.read_message2(m2)
    m3 = i.message3()
    r.mix_hash(b"\x23"); r.mix_hash(m3[1:])
    r.mix_key(dh(keys["e_r"], m3[1:]))
    r.mix_hash(b"\x24")
    c1 = r.encrypt_and_hash(public(keys["s_r"]))
    r.mix_key(dh(keys["s_r"], m3[1:]))
    m4 = b"\x24" + c1 + r.encrypt_and_hash(b"bob")
    i.read_message4(m4)
    m5 = i.message5()
    return [m.hex() for m in (m1, m2, m3, m4, m5)], i.code(), i.sym.h.hex()


def check_vectors():
    messages, code, h = vector_messages()
    assert messages[0] == "21354879cf771ae27bdd1b7c3f36c4afa0eef8b11058269ca65ca91044a478a012", messages[0]
    assert code == "274232" and h == "7a1cd78892d6bb24af7f941b1ed8604824f90370ea8658ad3045572fd1e3846e", (code, h)
    c = commitment(public(X25519PrivateKey.from_private_bytes(VECTOR_KEYS["e_i"])))
    assert dial_proof(b"\x42" * 32, 1960644, c).hex() == "1f0ef376a73ec371a31b119a47eb913d"
    messages, code, h = vector_messages(b"\x42" * 32, 1960644)
    assert messages[0] == "21354879cf771ae27bdd1b7c3f36c4afa0eef8b11058269ca65ca91044a478a0121f0ef376a73ec371a31b119a47eb913d", messages[0]
    assert messages[4] == ("2523b0ef1d26d690dc4e75568c5a8b451e80fcca25dd0c52bda2e738014f47ed078013def69017dfff1fa27b32d7b5af"
                           "d64f46193456d573ccc7f9ed1ae1de79f10a46498a34"), messages[4]
    assert code == "191631" and h == "87ed62cc912ca6f0e89f13c410666760f1a940f188c9b677d9ea14d0ffcd3666", (code, h)
    print("the test vectors of docs/SECURITY.md §8 hold")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("host", nargs="?")
    parser.add_argument("port", nargs="?", type=int)
    parser.add_argument("--seed")
    parser.add_argument("--secret")
    parser.add_argument("--epoch-offset", type=int, default=0)
    parser.add_argument("--version", type=int, default=PROOF_VERSION)
    parser.add_argument("--message1")
    parser.add_argument("--reveal")
    parser.add_argument("--raw")
    parser.add_argument("--timeout", type=float, default=15)
    parser.add_argument("--vectors", action="store_true")
    args = parser.parse_args()
    if args.vectors:
        return check_vectors()
    if not args.host or not args.port:
        parser.error("HOST and PORT are needed")
    print(json.dumps(probe(args)))


if __name__ == "__main__":
    sys.exit(main())
