#!/usr/bin/python3
"""H:4 packet relay between the VMs' serial ports and the host's btvirt.

Each VM's second serial port (ttyS1, where `btattach -P h4` runs) is a QEMU
chardev connected to one of our listening unix sockets. For every VM that
connects we open one connection to btvirt's BR/EDR server socket, which makes
btvirt create one emulated controller for that VM; both controllers live in the
same btvirt process and can therefore see, page and pair with each other.

Why a relay at all: QEMU's 16550 emulation hands the chardev one byte per
write, and btvirt 5.66 mis-parses H:4 input when a packet's type byte arrives on
its own (it reads the header from stale memory and the stream desyncs). So in the
VM -> btvirt direction we re-assemble complete H:4 packets and send each with
one write. The btvirt -> VM direction is copied unchanged (QEMU does not care).

usage: h4-relay.py --upstream SOCKET NAME=LISTEN_SOCKET [NAME=LISTEN_SOCKET ...]
Prints "h4-relay: listening" once every listening socket accepts connections.
"""

import argparse
import asyncio
import os
import signal
import struct
import sys

# H:4 packet type -> (header length, function giving the payload length from the header)
FRAMING = {
    0x01: (3, lambda h: h[2]),                                       # HCI command
    0x02: (4, lambda h: struct.unpack_from("<H", h, 2)[0]),          # ACL data
    0x03: (3, lambda h: h[2]),                                       # SCO data
    0x04: (2, lambda h: h[1]),                                       # event
    0x05: (4, lambda h: struct.unpack_from("<H", h, 2)[0] & 0x3FFF),  # ISO data
}


def log(*parts):
    print("h4-relay:", *parts, flush=True)


async def from_guest(name, guest, controller, stats):
    """Reads a byte stream from the VM, writes one whole H:4 packet per write."""
    while True:
        kind = (await guest.readexactly(1))[0]
        framing = FRAMING.get(kind)
        if framing is None:
            stats["dropped"] += 1
            log(f"{name}: unknown H:4 packet type 0x{kind:02x}, byte dropped")
            continue
        header_len, payload_len = framing
        header = await guest.readexactly(header_len)
        payload = await guest.readexactly(payload_len(header))
        controller.write(bytes((kind,)) + header + payload)
        await controller.drain()
        stats["to_controller"] += 1


async def to_guest(controller, guest, stats):
    while True:
        chunk = await controller.read(65536)
        if not chunk:
            return
        guest.write(chunk)
        await guest.drain()
        stats["to_guest_bytes"] += len(chunk)


def handler(name, upstream):
    async def handle(guest_reader, guest_writer):
        try:
            ctl_reader, ctl_writer = await asyncio.open_unix_connection(upstream)
        except OSError as error:
            log(f"{name}: cannot connect to {upstream}: {error}")
            guest_writer.close()
            return
        log(f"{name}: VM connected, controller attached")
        stats = {"to_controller": 0, "to_guest_bytes": 0, "dropped": 0}
        tasks = [asyncio.create_task(from_guest(name, guest_reader, ctl_writer, stats)),
                 asyncio.create_task(to_guest(ctl_reader, guest_writer, stats))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for writer in (guest_writer, ctl_writer):
                writer.close()
            log(f"{name}: closed ({stats['to_controller']} packets to the controller, "
                f"{stats['to_guest_bytes']} bytes to the VM, {stats['dropped']} bytes dropped)")
    return handle


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="btvirt's BR/EDR server socket")
    parser.add_argument("listen", nargs="+", metavar="NAME=SOCKET")
    args = parser.parse_args()
    servers = []
    for spec in args.listen:
        name, sep, path = spec.partition("=")
        if not sep or not path:
            parser.error(f"expected NAME=SOCKET, got {spec!r}")
        if os.path.exists(path):
            os.unlink(path)
        servers.append(await asyncio.start_unix_server(handler(name, args.upstream), path=path))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log("listening")
    await stop.wait()
    for server in servers:
        server.close()
    log("stopped")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
