#!/usr/bin/env python3
"""Mumble rooms on this machine (`make bench-rooms`, issue 31). Not a test: prints numbers, asserts nothing.

Part 1, mouth-to-ear: two release peervoiced (A, B) in ONE private headless PipeWire (bench/voice's
harness: quantum 256), each on its own bus. Per start (--runs, fresh daemons, server and state):
a fresh murmurd 1.3.4 on 127.0.0.1 (an ordinary process, as nobody when root); A and B JoinRoom
its root channel twice, once with JoinRoom's force-tcp (voice in the TCP tunnel) and once without
(voice over UDP once the server echoes a ping: the Room's VoicePath says "udp"), in alternating
order from start to start; each time A says Tests/Fixtures/speech.wav and ONE tap records A's
microphone and B's speaker: latency by cross-correlation, correlation. Then, in the same start, A
and B leave the room, pair and talk directly (UDP): the same measurement, the baseline.

Part 2, CPU: A alone in a channel of N = 2, 10, 30 users, the others pymumble 1.6.1 clients
(tests/rooms/mumble_client.py in the venv `make rooms-venv` makes), 1 or 3 of them playing a
440 Hz tone the whole window; A's CPU (utime + stime of all its threads, % of one core) over
--window s. Medians of --runs starts.

Prints a table with the issue's targets (through the server <= direct + 10 ms, which names UDP;
CPU with 30 users and 3 talkers <= 1.5 x the 2-user figure), writes bench/results/rooms.json.
"""
import argparse
import datetime
import json
import os
import platform
import pwd
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "voice"))
import analysis  # noqa: E402
import run as voice  # noqa: E402

ROOT = voice.ROOT
MURMURD = "/usr/sbin/murmurd"
PYMUMBLE = os.path.join(ROOT, ".build", "rooms-venv", "bin", "python")
DRIVER = os.path.join(ROOT, "tests", "rooms", "mumble_client.py")
CHILDREN = voice.CHILDREN
log = voice.log


class Murmur:
    """murmurd on 127.0.0.1 with its own ini and database in `directory`."""

    def __init__(self, directory):
        os.makedirs(directory)
        self.port = voice.free_port(socket.SOCK_STREAM)
        ini = os.path.join(directory, "murmur.ini")
        with open(ini, "w") as f:
            f.write(f"database={directory}/murmur.sqlite\nhost=127.0.0.1\nport={self.port}\nusers=100\n"
                    "bonjour=false\nlogfile=\n")
        launcher = []
        if os.getuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chmod(os.path.dirname(directory), 0o755)
            for path in [directory, ini]:
                os.chown(path, nobody.pw_uid, nobody.pw_gid)
            launcher = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        self.process = CHILDREN.start(launcher + [MURMURD, "-ini", ini, "-fg"], name="murmurd",
                                      log_path=os.path.join(directory, "murmur.log"))
        voice.wait_for("murmurd's TLS", self.handshake, 20, 0.05)

    def handshake(self):
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as raw:
                with context.wrap_socket(raw):
                    return True
        except OSError:
            return False

    def stop(self):
        CHILDREN.stop(self.process)


def join(daemon, url, options="{}"):
    """JoinRoom; returns the room's object path once the daemon's voice thread has it in the call."""
    since = os.path.getsize(daemon.log_path)

    def joined():
        with open(daemon.log_path, errors="replace") as f:
            f.seek(since)
            return "joined the call" in f.read()
    reply = daemon.call("JoinRoom", url, options)
    voice.wait_for(f"{daemon.label} in the call", joined, 10)
    return reply.split("'")[1]


def room_call(daemon, room, *args):
    return subprocess.run(["gdbus", "call", "--session", "-d", voice.BUS[0], "-o", room, "-m", *args],
                          env=daemon.env, capture_output=True, text=True, timeout=10).stdout


def leave(daemon, room):
    room_call(daemon, room, "org.example.PeerVoice.Room.Leave")


def voice_path(daemon, room):
    return room_call(daemon, room, "org.freedesktop.DBus.Properties.Get", "org.example.PeerVoice.Room", "VoicePath")


class Pids:
    def __init__(self, pids):
        self.pids = pids


def latency_start(binary, workdir, index):
    pw = voice.PipeWire(os.path.join(workdir, f"pw-{index}"))
    murmur = None
    daemons = []
    try:
        murmur = Murmur(os.path.join(workdir, f"murmur-{index}"))
        a = voice.PeerDaemon(pw, binary, workdir, f"a{index}", "bench-a", voice.MIC, voice.SPEAKER_A, [])
        b = voice.PeerDaemon(pw, binary, workdir, f"b{index}", "bench-b", voice.MIC_B, voice.SPEAKER, [])
        daemons = [a, b]
        ports = {d.label: d.listen_port() for d in daemons}
        result = {}
        # Alternating which goes first, so neither path always meets a warmer daemon.
        for path in ("tunnel", "udp") if index % 2 == 0 else ("udp", "tunnel"):
            options = "{'force-tcp': <true>}" if path == "tunnel" else "{}"
            rooms = [join(d, f"mumble://{d.label}@127.0.0.1:{murmur.port}", options) for d in daemons]
            wanted = "udp" if path == "udp" else "tcp"
            voice.wait_for(f"VoicePath {wanted}", lambda: all(f"'{wanted}'" in voice_path(d, r) for d, r in zip(daemons, rooms)), 10)
            time.sleep(1)
            result[path] = voice.measure(pw, Pids({"sender": a.pid, "receiver": b.pid}), os.path.join(workdir, f"{path}-{index}.wav"))
            for d, r in zip(daemons, rooms):
                leave(d, r)
        b_on_a, a_on_b, since = voice.pair(a, b, f"ip:127.0.0.1:{ports[b.label]}")
        voice.wait_for("direct voice", lambda: voice.voice_active(a, b_on_a, since[0]) and voice.voice_active(b, a_on_b, since[1]), 20)
        time.sleep(1)
        result["direct"] = voice.measure(pw, Pids({"sender": a.pid, "receiver": b.pid}), os.path.join(workdir, f"direct-{index}.wav"))
        return result
    finally:
        for d in daemons:
            d.stop_daemon()
            d.stop_bus()
        if murmur:
            murmur.stop()
        pw.stop()


def cpu_start(binary, workdir, index, users, talkers, window):
    pw = voice.PipeWire(os.path.join(workdir, f"cpu-pw-{index}-{users}-{talkers}"))
    murmur = None
    clients, a = [], None
    try:
        murmur = Murmur(os.path.join(workdir, f"cpu-murmur-{index}-{users}-{talkers}"))
        a = voice.PeerDaemon(pw, binary, workdir, f"cpu{index}-{users}-{talkers}", "bench-a", voice.MIC, voice.SPEAKER_A, [])
        a.listen_port()
        join(a, f"mumble://a@127.0.0.1:{murmur.port}")
        for k in range(users - 1):
            path = os.path.join(workdir, f"pymumble-{index}-{users}-{talkers}-{k}.log")
            p = subprocess.Popen([PYMUMBLE, DRIVER, "--port", str(murmur.port), "--user", f"user{k}"],
                                 stdin=subprocess.PIPE, stdout=open(path, "w"), stderr=subprocess.STDOUT, text=True)
            clients.append((p, path))
        voice.wait_for(f"{users - 1} pymumble clients", lambda: all("ready" in open(path).read() for _, path in clients), 120, 0.2)
        for p, _ in clients[:talkers]:
            p.stdin.write(f"tone {window + 4}\n")
            p.stdin.flush()
        time.sleep(2)
        before, t0 = voice.cpu_ticks(a.pid), time.monotonic()
        time.sleep(window)
        after, wall = voice.cpu_ticks(a.pid), time.monotonic() - t0
        return round(100.0 * (after - before) / voice.CLK_TCK / wall, 2)
    finally:
        for p, _ in clients:
            p.kill()
            p.wait()
        if a:
            a.stop_daemon()
            a.stop_bus()
        if murmur:
            murmur.stop()
        pw.stop()


def med(values):
    return voice.median(values)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, help="the peervoiced to measure (a release build)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--window", type=float, default=8.0, help="CPU window, seconds")
    parser.add_argument("--sizes", default="2,10,30")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-cpu", action="store_true")
    args = parser.parse_args()
    for tool in (MURMURD, PYMUMBLE):
        if not os.path.exists(tool):
            sys.exit(f"bench-rooms: {tool} is missing (make deps rooms-venv)")
    workdir = tempfile.mkdtemp(prefix="bench-rooms-")
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
               "cpus": os.cpu_count(), "runs": args.runs, "latency": [], "cpu": {}}
    try:
        if not args.skip_latency:
            for i in range(args.runs):
                log(f"latency start {i + 1}/{args.runs}")
                results["latency"].append(latency_start(args.bin, workdir, i))
        if not args.skip_cpu:
            for users in [int(s) for s in args.sizes.split(",")]:
                for talkers in (1, 3):
                    if talkers >= users:
                        continue
                    key = f"{users}u{talkers}t"
                    results["cpu"][key] = []
                    for i in range(args.runs):
                        log(f"cpu {users} users, {talkers} talking, start {i + 1}/{args.runs}")
                        results["cpu"][key].append(cpu_start(args.bin, workdir, i, users, talkers, args.window))
    finally:
        CHILDREN.stop_all()
    os.makedirs(voice.RESULTS, exist_ok=True)
    with open(os.path.join(voice.RESULTS, "rooms.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)

    print(f"\nbench-rooms: medians of {args.runs} fresh starts ({os.cpu_count()} CPUs, machine shared: see README)")
    if results["latency"]:
        print(f"{'path':<28}{'latency ms':>12}{'correlation':>13}{'PESQ-WB':>9}{'A CPU %':>9}{'B CPU %':>9}")
        for path, label in (("tunnel", "A -> murmurd -> B (tunnel)"), ("udp", "A -> murmurd -> B (UDP)"),
                            ("direct", "A -> B direct (UDP)")):
            rows = [r[path] for r in results["latency"]]
            print(f"{label:<28}{med([r.get('latency_ms') for r in rows]) or '-':>12}"
                  f"{med([r.get('xcorr') for r in rows]) or '-':>13}{med([r.get('pesq_wb') for r in rows]) or '-':>9}"
                  f"{med([r.get('cpu_pct', {}).get('sender') for r in rows]) or '-':>9}"
                  f"{med([r.get('cpu_pct', {}).get('receiver') for r in rows]) or '-':>9}")
        tunnel, udp, direct = (med([r[path].get("latency_ms") for r in results["latency"]]) for path in ("tunnel", "udp", "direct"))
        if udp is not None and direct is not None:
            print(f"target: through the server over UDP <= direct + 10 ms: {udp - direct:+.1f} ms"
                  + (f" (the tunnel: {tunnel - direct:+.1f} ms)" if tunnel is not None else ""))
    if results["cpu"]:
        print(f"\n{'users':>6}{'talkers':>9}{'A CPU % (median)':>18}   runs")
        for key, values in results["cpu"].items():
            users, talkers = key.rstrip("t").split("u")
            print(f"{users:>6}{talkers:>9}{med(values) or '-':>18}   {values}")
        two, thirty = med(results["cpu"].get("2u1t", [])), med(results["cpu"].get("30u3t", []))
        if two and thirty:
            print(f"target: 30 users / 3 talkers <= 1.5 x 2 users: {thirty / two:.2f} x")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
