#!/usr/bin/env python3
"""A delaying, lossy wire between two TUN devices (bench/files: this kernel has no netem).

Makes two TUN devices (IFF_TUN | IFF_NO_PI) named by --a and --b in the namespace it runs in; the
bench then moves each into its own network namespace and addresses them point to point. Every IP
packet read from one is written into the other --delay-ms later, in order, unless it is dropped
(each packet independently with probability --loss-percent / 100, from a seeded generator). Rate
limits are the devices' own qdiscs (tbf), set by the bench. Prints "ready" once both exist, and on
SIGTERM a line of JSON with the packets forwarded and dropped per direction.
"""
import argparse
import collections
import errno
import fcntl
import json
import os
import random
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--delay-ms", type=float, default=20.0, help="one way, each direction")
    ap.add_argument("--loss-percent", type=float, default=1.0, help="each direction")
    ap.add_argument("--seed", type=int, default=30)
    args = ap.parse_args()
    delay, loss = args.delay_ms / 1000.0, args.loss_percent / 100.0
    draw = random.Random(args.seed).random
    fds = {"a": open_tun(args.a), "b": open_tun(args.b)}
    other = {"a": "b", "b": "a"}
    # Per direction (named by where packets come from): (due, packet), in arrival order.
    queues = {side: collections.deque() for side in fds}
    counts = {side: {"forwarded": 0, "dropped": 0} for side in fds}
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    print("ready", flush=True)
    by_fd = {fd: side for side, fd in fds.items()}
    while not stopping:
        now = time.monotonic()
        for side, queue in queues.items():
            while queue and queue[0][0] <= now:
                try:
                    os.write(fds[other[side]], queue.popleft()[1])
                    counts[side]["forwarded"] += 1
                except (BlockingIOError, OSError):
                    counts[side]["dropped"] += 1
        due = [q[0][0] for q in queues.values() if q]
        timeout = max(0.0, min(due) - time.monotonic()) if due else 0.5
        try:
            readable, _, _ = select.select(list(by_fd), [], [], timeout)
        except InterruptedError:
            continue
        now = time.monotonic()
        for fd in readable:
            side = by_fd[fd]
            while True:
                try:
                    packet = os.read(fd, 65536)
                except BlockingIOError:
                    break
                except OSError as e:
                    # EBADFD: the device is not up yet (the bench is still moving and addressing it).
                    if e.errno != errno.EBADFD:
                        raise
                    time.sleep(0.01)
                    break
                if draw() < loss:
                    counts[side]["dropped"] += 1
                else:
                    queues[side].append((now + delay, packet))
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    sys.exit(main())
