#!/usr/bin/env python3
"""A third-party Mumble client for RoomTests: pymumble (PyPI, in the venv `make rooms-venv` makes)
driven line by line. Nobody here wrote its protocol code, so what it sees of PeerVoice is what any
Mumble user would.

    mumble_client.py --port P --user NAME [--password PW] [--certificate PEM] [--create-channel NAME] [--channel NAME]

Reads commands from stdin (a FIFO the test writes), one per line:
    users            prints `users JSON`: [{"session", "name", "channel", "self_mute", "hash"}] of our
                     channel (hash: the SHA-1 of the user's client certificate, "" without one)
    send TEXT        text to our channel
    mute | unmute    our self-mute
    kick NAME REASON | ban NAME REASON   (as an administrator: the SuperUser)
    tone SECONDS     a 440 Hz sine (48 kHz, 16-bit mono, Opus through the TCP tunnel)
    heard            prints `heard JSON`: {"seconds", "loud_seconds"} of what it received so far
                     (PCM decoded by pymumble; loud: 20 ms windows above -40 dBFS)
    quit
Prints `ready` once in its channel (or `rejected JSON`, the server's reason, and exits 3), `text JSON` ({"actor": name, "message": text}) for each
message received. Lines are flushed at once.
"""
import argparse
import json
import math
import struct
import sys
import time

import pymumble_py3 as pymumble
from pymumble_py3.constants import PYMUMBLE_CLBK_SOUNDRECEIVED, PYMUMBLE_CLBK_TEXTMESSAGERECEIVED
from pymumble_py3.errors import ConnectionRejectedError


def say(line):
    print(line, flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", default="")
    parser.add_argument("--certificate", help="a PEM file with the client certificate and its key")
    parser.add_argument("--create-channel")
    parser.add_argument("--channel")
    args = parser.parse_args()

    client = pymumble.Mumble(args.host, args.user, port=args.port, password=args.password, reconnect=False,
                             certfile=args.certificate)
    # pymumble raises a Reject in its own thread: keep the server's reason to print it.
    rejected = []
    dispatch = client.dispatch_control_message

    def keep_rejection(kind, message):
        try:
            return dispatch(kind, message)
        except ConnectionRejectedError as error:
            rejected.append(str(error))
            raise

    client.dispatch_control_message = keep_rejection
    client.set_application_string("RoomTests pymumble")

    def on_text(message):
        actor = client.users[message.actor]["name"] if message.actor in client.users else "?"
        say("text " + json.dumps({"actor": actor, "message": message.message}))

    client.callbacks.set_callback(PYMUMBLE_CLBK_TEXTMESSAGERECEIVED, on_text)
    heard = bytearray()

    def on_sound(user, chunk):
        heard.extend(chunk.pcm)

    client.set_receive_sound(True)
    client.callbacks.set_callback(PYMUMBLE_CLBK_SOUNDRECEIVED, on_sound)
    client.start()
    client.is_ready()
    if rejected:
        say("rejected " + json.dumps(rejected[0]))
        return 3
    if args.create_channel:
        client.channels.new_channel(0, args.create_channel)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                client.channels.find_by_name(args.create_channel)
                break
            except Exception:
                time.sleep(0.05)
    if args.channel:
        client.channels.find_by_name(args.channel).move_in()
        deadline = time.time() + 10
        while client.users.myself["channel_id"] != client.channels.find_by_name(args.channel)["channel_id"]:
            if time.time() > deadline:
                say("error: could not enter " + args.channel)
                return 1
            time.sleep(0.05)
    say("ready")

    for line in sys.stdin:
        command, _, rest = line.rstrip("\n").partition(" ")
        if command == "users":
            mine = client.users.myself["channel_id"]
            say("users " + json.dumps([
                {"session": u["session"], "name": u["name"], "channel": u["channel_id"], "self_mute": bool(u.get("self_mute", False)),
                 "hash": u.get("hash", "")}
                for u in client.users.values() if u["channel_id"] == mine and u["session"] != client.users.myself_session]))
        elif command == "send":
            client.my_channel().send_text_message(rest)
        elif command == "tone":
            samples = int(48000 * float(rest))
            client.sound_output.add_sound(b"".join(
                struct.pack("<h", int(10000 * math.sin(2 * math.pi * 440 * i / 48000))) for i in range(samples)))
        elif command == "heard":
            samples = struct.unpack("<%dh" % (len(heard) // 2), bytes(heard[:len(heard) // 2 * 2]))
            window = 960
            loud = 0
            for start in range(0, len(samples) - window + 1, window):
                power = sum(s * s for s in samples[start:start + window]) / window
                if power > 0 and 10 * math.log10(power / 32768 ** 2) > -40:
                    loud += 1
            say("heard " + json.dumps({"seconds": len(samples) / 48000, "loud_seconds": loud * window / 48000}))
        elif command in ("kick", "ban"):
            name, _, reason = rest.partition(" ")
            for user in list(client.users.values()):
                if user["name"] == name:
                    (user.kick if command == "kick" else user.ban)(reason)
        elif command == "mute":
            client.users.myself.mute()
        elif command == "unmute":
            client.users.myself.unmute()
        elif command == "quit":
            break
    client.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
