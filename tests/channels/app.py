#!/usr/bin/python3
"""A channel app for ChannelTests: a real client of peervoiced in its own process (dbus-python,
the way the README's example is written). Debian's /usr/bin/python3 (python3-dbus, python3-gi).

    app.py listen CHANNEL ACTION [ARG...]   register CHANNEL; handle each stream with ACTION;
                                            print "registered" once RegisterChannel returned
    app.py open PEER CHANNEL MODE ACTION [ARG...]

Listen actions:
    record-messages OUT      append one line "LENGTH SHA256" per message received to OUT, then
                             "end" when the stream ends cleanly, "reset ERROR" when it does not
    count-datagrams OUT      write the number of datagrams received so far to OUT (each second)
    stall SECONDS OUT        take the stream, read nothing for SECONDS, then read to the end and
                             write "BYTES SHA256" to OUT
    echo                     write back everything read
    refuse                   answer NewStream with an error
    hold OUT                 keep the stream; write "eof" or "reset ERROR" to OUT when it ends
Open actions:
    send-messages SEED COUNT OUT      COUNT messages of random sizes 1-65536 (seeded); OUT as
                                      record-messages writes it; then a clean end
    send-datagrams COUNT RATE OUT     COUNT datagrams of 1-1200 bytes, RATE per second; OUT gets
                                      "SENT SLOWEST_SEND_MS"
    write BYTES OUT                   write BYTES pseudo-random bytes, close; OUT gets "BYTES SHA256"
    hold OUT                          as listen's hold
Every OpenStream error is printed as "error NAME: MESSAGE" on stdout, exit status 3.
"""
import hashlib
import os
import random
import socket
import sys
import threading
import time

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

NAME = "org.example.PeerVoice"
PATH = "/org/example/PeerVoice"


def write_file(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def pseudo_random(seed, count):
    """Deterministic bytes, fast: a repeated random block shifted by a counter."""
    block = random.Random(seed).randbytes(1 << 20)
    out = bytearray()
    i = 0
    while len(out) < count:
        out += block[i % 251:] + block[: i % 251]
        i += 1
    return bytes(out[:count])


def record_messages(sock, out):
    lines = []
    try:
        while True:
            data = sock.recv(65536 + 1)
            if not data:
                lines.append("end")
                break
            lines.append("%d %s" % (len(data), hashlib.sha256(data).hexdigest()))
    except OSError as e:
        lines.append("reset %s" % e.strerror)
    write_file(out, "\n".join(lines) + "\n")


def count_datagrams(sock, out):
    count = 0
    sock.settimeout(1.0)
    while True:
        try:
            sock.recv(2048)
            count += 1
        except socket.timeout:
            pass
        except OSError:
            break
        write_file(out, str(count))


def stall(sock, seconds, out):
    time.sleep(seconds)
    digest = hashlib.sha256()
    total = 0
    while True:
        data = sock.recv(1 << 20)
        if not data:
            break
        digest.update(data)
        total += len(data)
    write_file(out, "%d %s" % (total, digest.hexdigest()))


def echo(sock):
    while True:
        data = sock.recv(65536)
        if not data:
            break
        sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)


def hold(sock, out):
    try:
        while sock.recv(65536):
            pass
        write_file(out, "eof")
    except OSError as e:
        write_file(out, "reset %s" % e.strerror)


def listen(channel, action, args):
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.SessionBus()
    service = dbus.Interface(bus.get_object(NAME, PATH), NAME)

    class Handler(dbus.service.Object):
        @dbus.service.method("org.example.PeerVoice.ChannelHandler", in_signature="ssha{sv}")
        def NewStream(self, peer, channel, fd, properties):
            if action == "refuse":
                os.close(fd.take())
                raise dbus.exceptions.DBusException("this app takes no streams", name="org.example.Chess.Error.Busy")
            sock = socket.socket(fileno=fd.take())
            print("stream %s %s %s" % (peer, properties["mode"], properties["name"]), flush=True)
            work = {
                "record-messages": lambda: record_messages(sock, args[0]),
                "count-datagrams": lambda: count_datagrams(sock, args[0]),
                "stall": lambda: stall(sock, float(args[0]), args[1]),
                "echo": lambda: echo(sock),
                "hold": lambda: hold(sock, args[0]),
            }[action]
            threading.Thread(target=work, daemon=True).start()

    Handler(bus, "/org/example/ChannelApp")
    service.RegisterChannel(channel, dbus.ObjectPath("/org/example/ChannelApp"), dbus.Dictionary({}, signature="sv"))
    print("registered", flush=True)
    GLib.MainLoop().run()


def open_stream(peer, channel, mode, action, args):
    bus = dbus.SessionBus()
    service = dbus.Interface(bus.get_object(NAME, PATH), NAME)
    try:
        fd = service.OpenStream(peer, channel, dbus.Dictionary({"mode": mode}, signature="sv"), timeout=30)
    except dbus.exceptions.DBusException as e:
        print("error %s: %s" % (e.get_dbus_name(), e.get_dbus_message()), flush=True)
        sys.exit(3)
    sock = socket.socket(fileno=fd.take())
    print("opened", flush=True)
    if action == "send-messages":
        rng = random.Random(int(args[0]))
        payload = random.Random(1).randbytes(65536)
        lines = []
        for _ in range(int(args[1])):
            size = rng.randint(1, 65536)
            offset = rng.randint(0, 65536 - size)
            data = payload[offset:offset + size]
            sock.sendall(data)
            lines.append("%d %s" % (size, hashlib.sha256(data).hexdigest()))
        sock.shutdown(socket.SHUT_WR)
        write_file(args[2], "\n".join(lines + ["end"]) + "\n")
        sock.recv(1)
    elif action == "send-datagrams":
        rng = random.Random(7)
        count, rate = int(args[0]), float(args[1])
        slowest = 0.0
        start = time.monotonic()
        for i in range(count):
            data = rng.randbytes(rng.randint(1, 1200))
            before = time.monotonic()
            sock.send(data)
            slowest = max(slowest, time.monotonic() - before)
            delay = start + (i + 1) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        write_file(args[2], "%d %.1f" % (count, slowest * 1000))
    elif action == "write":
        total = int(args[0])
        data = pseudo_random(3, min(total, 8 << 20))
        digest = hashlib.sha256()
        sent = 0
        while sent < total:
            chunk = data[: min(len(data), total - sent)]
            sock.sendall(chunk)
            digest.update(chunk)
            sent += len(chunk)
        sock.shutdown(socket.SHUT_WR)
        write_file(args[1], "%d %s" % (sent, digest.hexdigest()))
    elif action == "hold":
        hold(sock, args[0])


if __name__ == "__main__":
    if sys.argv[1] == "listen":
        listen(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        open_stream(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:])
