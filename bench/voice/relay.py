#!/usr/bin/env python3
"""Impairing relay for bench/voice (this kernel has no netem): UDP with delay, jitter and loss,
and optionally TCP passed through untouched on the same port number.

  relay.py --listen 5004 --forward 5006 [--tcp] [--loss 10] [--delay 30] [--jitter 10] [--seed 1]

UDP datagrams arriving on 127.0.0.1:LISTEN from anyone but the target are delayed by
DELAY + N(0, JITTER) ms, clipped to [5, 100] ms when jitter is on (the traces of bench/jitter),
so they may overtake each other as on a real path; LOSS percent are dropped (independent draws
from a seeded RNG). They leave from the listen socket to 127.0.0.1:FORWARD; datagrams from the
target go back, unimpaired, to the last sender. With --tcp, connections to 127.0.0.1:LISTEN are
relayed to 127.0.0.1:FORWARD as they are (the PeerVoice link: a daemon that dials the relay
sends its voice to the relay's address, so its voice is impaired and its link is not).
On SIGINT/SIGTERM it prints one JSON line of counters to stdout and exits, with the median and
99th percentile of the delay the forwarded datagrams really spent in the relay (delay_p50_ms,
delay_p99_ms): the network part of the ideal playout delay.
"""
import argparse
import heapq
import json
import random
import selectors
import signal
import socket
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--forward", type=int, required=True)
    ap.add_argument("--tcp", action="store_true")
    ap.add_argument("--loss", type=float, default=0.0, help="percent")
    ap.add_argument("--delay", type=float, default=0.0, help="ms")
    ap.add_argument("--jitter", type=float, default=0.0, help="ms (standard deviation)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    host = "127.0.0.1"
    target = (host, a.forward)

    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((host, a.listen))
    udp.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(udp, selectors.EVENT_READ, "udp")
    listener = None
    if a.tcp:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, a.listen))
        listener.listen(8)
        listener.setblocking(False)
        sel.register(listener, selectors.EVENT_READ, "accept")
    peers = {}  # socket -> its partner
    stats = {"received": 0, "dropped": 0, "forwarded": 0, "returned": 0, "tcp_connections": 0}
    queue, order = [], 0
    delays = []  # ms each forwarded datagram spent in the relay, as measured
    last_sender = None
    running = True

    def stop(*_):
        nonlocal running
        running = False
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    def close_pair(s):
        other = peers.pop(s, None)
        for x in (s, other):
            if x is None:
                continue
            peers.pop(x, None)
            try:
                sel.unregister(x)
            except (KeyError, ValueError):
                pass
            x.close()

    while running:
        timeout = 0.2
        if queue:
            timeout = max(0.0, queue[0][0] - time.monotonic())
        try:
            events = sel.select(timeout)
        except InterruptedError:
            continue
        for key, _ in events:
            kind, s = key.data, key.fileobj
            if kind == "udp":
                while True:
                    try:
                        data, sender = udp.recvfrom(65536)
                    except BlockingIOError:
                        break
                    if sender == target:
                        if last_sender is not None:
                            udp.sendto(data, last_sender)
                            stats["returned"] += 1
                        continue
                    last_sender = sender
                    stats["received"] += 1
                    if a.loss > 0 and rng.random() * 100.0 < a.loss:
                        stats["dropped"] += 1
                        continue
                    delay = a.delay
                    if a.jitter > 0:
                        delay = min(100.0, max(5.0, a.delay + rng.gauss(0.0, a.jitter)))
                    received_at = time.monotonic()
                    heapq.heappush(queue, (received_at + delay / 1000.0, order, data, received_at))
                    order += 1
            elif kind == "accept":
                try:
                    client, _ = listener.accept()
                except BlockingIOError:
                    continue
                server = socket.create_connection(target)
                for x in (client, server):
                    x.setblocking(False)
                    x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    sel.register(x, selectors.EVENT_READ, "tcp")
                peers[client], peers[server] = server, client
                stats["tcp_connections"] += 1
            else:
                try:
                    data = s.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    close_pair(s)
                    continue
                other = peers.get(s)
                if other is not None:
                    other.setblocking(True)
                    try:
                        other.sendall(data)
                    except OSError:
                        close_pair(s)
                        continue
                    other.setblocking(False)
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, data, received_at = heapq.heappop(queue)
            udp.sendto(data, target)
            stats["forwarded"] += 1
            delays.append(1000.0 * (time.monotonic() - received_at))
    if delays:
        delays.sort()
        for name, q in (("delay_p50_ms", 0.50), ("delay_p99_ms", 0.99)):
            stats[name] = round(delays[min(len(delays) - 1, int(q * len(delays)))], 2)
    print(json.dumps(stats), flush=True)
    for s in list(peers):
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
