#!/usr/bin/env python3
"""PeerVoice voice against a GStreamer Opus/RTP baseline, on this machine (`make bench-voice`).

Everything runs in ONE private headless PipeWire (scripts/pipewire-session.sh, quantum pinned
at 256 = 5.33 ms) with four virtual devices: the speech goes into `peervoice-test-mic`, comes out
of `peervoice-test-speaker`, and ONE 2-channel pw-record taps both (channel 0 = the mic's
capture, channel 1 = the speaker's monitor), so the cross-correlation lag is the mouth-to-ear
latency without clock skew. The other two devices are the far ends nobody listens to:
`bench-speaker-a` (A's speaker) and `bench-mic-b` (B's silent microphone).

  peervoice  two release peervoiced on private buses, `--listen 127.0.0.1:0 --no-cue
             --frame-ms F`; A: --source peervoice-test-mic --sink bench-speaker-a, B: --source
             bench-mic-b --sink peervoice-test-speaker; A Connects to B (or to the relay in front
             of B), both confirm, voice starts on connect. A speaks, B listens.
  gstreamer  pipewiresrc → opusenc (voice, 24 kbit/s, F ms) → rtpopuspay → udpsink | udpsrc →
             rtpjitterbuffer latency=40 → rtpopusdepay → opusdec plc=true → pipewiresink sync=false
             (--gst-latency N sets rtpjitterbuffer's latency, for its delay/quality trade-off)
  gstreamer-call  the same elements as a call: each side one gst-launch that sends and receives
             (A: mic + bench-speaker-a, B: bench-mic-b + speaker), as each peervoiced does
  gstreamer-dsp   gstreamer-call with webrtcdsp + webrtcechoprobe (webrtc-audio-processing 0.3, set as
             PeerVoice's capture processing) on each side: PeerVoice with its processing on

Network: `clean` (loopback), or through bench/voice/relay.py: 30 ms + N(0, 10 ms) delay clipped
to [5, 100] ms (reordering allowed), with 0, 5 or 10 % random loss. For PeerVoice A dials the
relay, which passes the TCP link through untouched and impairs A's voice datagrams.

For every (frame, network, system): start, wait until voice runs, let it settle (--settle s),
then --runs times: tap on, CPU snapshot, play Tests/Fixtures/speech.wav (7.4 s) into the mic,
0.6 s tail, CPU snapshot, tap off; latency (global cross-correlation lag over the speech, and
per 0.5 s window), PESQ-WB (P.862.2), STOI, CPU % of one core per process from /proc/PID/stat.
Prints a table of medians with the targets, writes bench/results/voice.json and voice.png.
Asserts nothing: exits non-zero only when a run could not be carried out.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SESSION_SCRIPT = os.path.join(ROOT, "scripts", "pipewire-session.sh")
RELAY = os.path.join(ROOT, "bench", "voice", "relay.py")
SPEECH = os.path.join(ROOT, "Tests", "Fixtures", "speech.wav")
RESULTS = os.path.join(ROOT, "bench", "results")
MIC, SPEAKER = "peervoice-test-mic", "peervoice-test-speaker"
SPEAKER_A, MIC_B = "bench-speaker-a", "bench-mic-b"
QUANTUM = 256
RATE = 48000
CLK_TCK = os.sysconf("SC_CLK_TCK")
BUS = ["org.example.PeerVoice", "/org/example/PeerVoice", "org.example.PeerVoice"]

# capture quantum + frame + Opus lookahead (312 samples) + playback quantum
FLOOR_MS = {f: round(1000 * (2 * QUANTUM + 312) / RATE + f, 1) for f in (10, 20)}
# Issue 20: clean latency at most 1.05 x the floor
CLEAN_TARGET_MS = {f: round(1.05 * floor, 1) for f, floor in FLOOR_MS.items()}

CONDITIONS = {
    "clean": None,
    "j30": {"delay": 30, "jitter": 10, "loss": 0},
    "j30-loss5": {"delay": 30, "jitter": 10, "loss": 5},
    "j30-loss10": {"delay": 30, "jitter": 10, "loss": 10},
}


class BenchError(Exception):
    """A run could not be carried out."""


class Terminated(BaseException):
    pass


def on_signal(signum, _frame):
    raise Terminated(f"signal {signum}")


def log(message):
    print(message, file=sys.stderr, flush=True)


def wait_for(what, predicate, timeout, interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BenchError(f"timed out waiting for {what}")
        time.sleep(interval)


def free_port(kind=socket.SOCK_DGRAM):
    """A port free for both UDP and TCP on 127.0.0.1."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, kind) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        other = socket.SOCK_STREAM if kind == socket.SOCK_DGRAM else socket.SOCK_DGRAM
        try:
            with socket.socket(socket.AF_INET, other) as s:
                s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
    raise BenchError("no free port")


def cpu_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime (fields 14, 15)
    except (OSError, IndexError, ValueError):
        return None


def thread_ticks(pid):
    """utime + stime of each thread of `pid`, summed by thread name."""
    result = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return result
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        result[name] = result.get(name, 0) + int(fields[11]) + int(fields[12])
    return result


class Children:
    """Every process this benchmark starts, stopped by its own PID."""

    def __init__(self):
        self.procs = []

    def start(self, args, env=None, stdout=None, name=None, log_path=None):
        out = open(log_path, "ab") if log_path else (stdout or subprocess.DEVNULL)
        p = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT if log_path else subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL)
        p.bench_name = name or os.path.basename(args[0])
        self.procs.append(p)
        return p

    def stop(self, p, sig=signal.SIGTERM, timeout=5.0):
        if p.poll() is None:
            try:
                p.send_signal(sig)
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{p.bench_name} ({p.pid}) ignored signal {sig}; killing it")
                p.kill()
                p.wait()
        if p in self.procs:
            self.procs.remove(p)
        return p.returncode

    def stop_all(self):
        for p in reversed(list(self.procs)):
            self.stop(p)


CHILDREN = Children()


# ---------------------------------------------------------------------------------------------
# PipeWire


class PipeWire:
    def __init__(self, directory):
        self.directory = directory
        r = subprocess.run([SESSION_SCRIPT, "start", directory], capture_output=True, text=True, timeout=90)
        if r.returncode != 0:
            raise BenchError(f"pipewire-session.sh start failed: {r.stderr}{r.stdout}")
        self.started = True
        self.env = dict(os.environ)
        with open(os.path.join(directory, "env.sh")) as f:
            for line in f:
                if line.startswith("export ") and "=" in line:
                    k, v = line[7:].strip().split("=", 1)
                    self.env[k] = v.strip("'")
        self.add_devices([(SPEAKER_A, "Audio/Sink"), (MIC_B, "Audio/Source/Virtual")])
        self.run("pw-metadata", "-n", "settings", "0", "clock.force-quantum", str(QUANTUM))
        self.serial = 0

    def add_devices(self, devices):
        """Mono virtual devices like the session's two: (node name, "Audio/Sink" or
        "Audio/Source/Virtual") each; returns once their ports are there."""
        for name, media_class in devices:
            self.run("pw-cli", "create-node", "adapter",
                     "{ factory.name = support.null-audio-sink node.name = \"%s\" media.class = \"%s\" "
                     "audio.position = [ MONO ] audio.rate = 48000 object.linger = true monitor.channel-volumes = true "
                     "adapter.auto-port-config = { mode = dsp monitor = true position = preserve } }" % (name, media_class))
        wait_for("the extra virtual devices", lambda: {f"{name}:monitor_MONO" if media_class == "Audio/Sink" else
                                                       f"{name}:capture_MONO" for name, media_class in devices} <= self.ports(), 10)

    def run(self, *args, timeout=10):
        r = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise BenchError(f"{' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def ports(self):
        return set(self.run("pw-link", "-io").split())

    def links(self):
        result, current = [], None
        for line in self.run("pw-link", "-l").splitlines():
            if not line.startswith(" "):
                current = line.strip()
            elif "|->" in line and current:
                result.append((current, line.split("|->", 1)[1].strip()))
        return result

    def linked(self, source_node, sink_node):
        return any(o.startswith(source_node + ":") and i.startswith(sink_node + ":") for o, i in self.links())

    def wait_ports(self, names, timeout=10):
        wait_for(f"ports {names}", lambda: set(names) <= self.ports(), timeout)

    def tap(self, path, ports=(f"{MIC}:capture_MONO", f"{SPEAKER}:monitor_MONO")):
        """ONE pw-record of `ports` (channel i = ports[i]), sampled in the same graph cycles."""
        self.serial += 1
        name = f"bench-tap-{self.serial}"
        channels = ["FL", "FR"] if len(ports) == 2 else [f"AUX{i}" for i in range(len(ports))]
        p = CHILDREN.start(["pw-record", "--target", "0", "--latency", str(QUANTUM), "--rate", str(RATE),
                            "--channels", str(len(ports)), "--channel-map", ",".join(channels), "--format", "s16",
                            "-P", "{ node.name = \"%s\" }" % name, path], env=self.env, name=name)
        self.wait_ports([f"{name}:input_{c}" for c in channels])
        for port, c in zip(ports, channels):
            self.run("pw-link", port, f"{name}:input_{c}")
        return p

    def speak(self, wav, mic=MIC):
        """Plays `wav` into the virtual mic; returns once it has played."""
        self.speak_all([(wav, mic)])

    def speak_all(self, speech):
        """Plays each (wav, virtual mic) of `speech` at once; returns once all have played."""
        players = []
        try:
            for wav, mic in speech:
                self.serial += 1
                name = f"bench-inject-{self.serial}"
                players.append((CHILDREN.start(["pw-play", "--target", "0", "--latency", str(QUANTUM),
                                                "-P", "{ node.name = \"%s\" }" % name, wav], env=self.env, name=name),
                                name, mic))
            self.wait_ports([f"{name}:output_MONO" for _, name, _ in players])
            for _, name, mic in players:
                self.run("pw-link", f"{name}:output_MONO", f"{mic}:input_MONO")
            for p, _, _ in players:
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    raise BenchError(f"{p.bench_name} did not finish playing within 60 s (the graph stalled)")
        finally:
            for p, _, _ in players:
                CHILDREN.stop(p, signal.SIGINT)

    def stop(self):
        if self.started:
            self.started = False
            subprocess.run([SESSION_SCRIPT, "stop", self.directory], capture_output=True, timeout=60)


# ---------------------------------------------------------------------------------------------
# The two systems


def start_relay(listen, forward, impair, tcp, logdir, label):
    args = [sys.executable, RELAY, "--listen", str(listen), "--forward", str(forward),
            "--loss", str(impair["loss"]), "--delay", str(impair["delay"]), "--jitter", str(impair["jitter"]),
            "--seed", "20250501"]
    if tcp:
        args.append("--tcp")
    out = open(os.path.join(logdir, f"{label}.relay.json"), "wb")
    p = CHILDREN.start(args, stdout=out, name="relay")
    if tcp:
        def accepting():
            try:
                with socket.create_connection(("127.0.0.1", listen), timeout=0.2):
                    return True
            except OSError:
                return False
        # A probe connection is relayed to the target and closed at once: harmless.
        wait_for("the relay", accepting, 10)
    else:
        time.sleep(0.3)
    return p


def stop_relay(p, logdir, label):
    CHILDREN.stop(p, signal.SIGINT)
    try:
        with open(os.path.join(logdir, f"{label}.relay.json")) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None


class PeerDaemon:
    """One peervoiced on its own private session bus, with a `gdbus monitor` of its signals in
    WORKDIR/LABEL.monitor and its log in WORKDIR/LABEL.log (bench/group starts several)."""

    def __init__(self, pw, binary, workdir, label, name, source, sink, options, niceness=None,
                 listen="127.0.0.1:0", launcher=()):
        """`niceness`: run it under `nice -n NICENESS` (a negative one, as root, puts it ahead of
        other work on a shared machine); `listen`: its --listen address; `launcher`: a command it
        runs under (bench/channels: `ip netns exec NS`)."""
        self.workdir, self.label = workdir, label
        self.listen_host = listen.rsplit(":", 1)[0]
        sock = os.path.join(workdir, f"{label}.bus")
        address = f"unix:path={sock}"
        self.bus = CHILDREN.start(["dbus-daemon", "--session", "--nofork", "--nopidfile", f"--address={address}"],
                                  name=f"dbus-{label}")
        wait_for("dbus-daemon", lambda: os.path.exists(sock), 10)
        self.env = dict(pw.env)
        self.env["DBUS_SESSION_BUS_ADDRESS"] = address
        self.env["LANG"] = "C.UTF-8"
        self.monitor = os.path.join(workdir, f"{label}.monitor")
        self.log_path = os.path.join(workdir, f"{label}.log")
        wait_for("the bus to answer", lambda: subprocess.run(
            ["gdbus", "call", "--session", "-d", "org.freedesktop.DBus", "-o", "/org/freedesktop/DBus",
             "-m", "org.freedesktop.DBus.GetId"], env=self.env, capture_output=True).returncode == 0, 10)
        self.monitor_process = CHILDREN.start(["stdbuf", "-oL", "gdbus", "monitor", "--session", "--dest", BUS[0]],
                                              env=self.env, log_path=self.monitor, name=f"monitor-{label}")
        self.process = CHILDREN.start(
            list(launcher) + (["nice", "-n", str(niceness)] if niceness is not None else []) +
            [binary, "--state-dir", os.path.join(workdir, f"{label}-state"), "--name", name,
             "--listen", listen, "--source", source, "--sink", sink, "--no-cue", "--verbose"] + list(options),
            env=self.env, log_path=self.log_path, name=f"peervoiced-{label}")

    @property
    def pid(self):
        return self.process.pid

    def monitor_size(self):
        """Where the monitor's output ends now: pass it as `since` to see only what comes later."""
        try:
            return os.path.getsize(self.monitor)
        except OSError:
            return 0

    def monitor_match(self, pattern, since=0):
        try:
            with open(self.monitor, errors="replace") as f:
                f.seek(since)
                m = re.search(pattern, f.read())
        except OSError:
            return None
        return m.group(1) if m and m.groups() else (m.group(0) if m else None)

    def call(self, method, *args):
        r = subprocess.run(["gdbus", "call", "--session", "-d", BUS[0], "-o", BUS[1], "-m", f"{BUS[2]}.{method}", *args],
                           env=self.env, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise BenchError(f"{method} on {self.label}: {r.stderr.strip()}")
        return r.stdout

    def listen_port(self):
        def get():
            if self.process.poll() is not None:
                with open(self.log_path, errors="replace") as f:
                    raise BenchError(f"peervoiced {self.label} exited ({self.process.returncode}): {f.read()[-800:]}")
            r = subprocess.run(["gdbus", "call", "--session", "-d", BUS[0], "-o", BUS[1], "-m",
                                "org.freedesktop.DBus.Properties.Get", BUS[2], "ListenAddress"],
                               env=self.env, capture_output=True, text=True)
            m = re.search(re.escape(self.listen_host) + r":(\d+)", r.stdout)
            return int(m.group(1)) if m and m.group(1) != "0" else None
        return wait_for(f"peervoiced {self.label} to listen", get, 20, 0.05)

    def stop_daemon(self):
        CHILDREN.stop(self.process)

    def stop_bus(self):
        CHILDREN.stop(self.monitor_process)
        CHILDREN.stop(self.bus)

    def statistics(self):
        """The receive statistics of the last voice session that ended (its closing log line)."""
        try:
            with open(self.log_path, errors="replace") as f:
                lines = [line for line in f if "stopped (" in line and "received" in line]
        except OSError:
            return None
        return lines[-1].split("): ", 1)[-1].strip() if lines else None


def pair(dialer, answerer, target):
    """`dialer` Connects to `target` (ip:HOST:PORT, `answerer` or a relay in front of it); both
    confirm the code of the peer they were asked about (peers are named by key, pv:..., since peer
    identity). Returns the answerer's id on the dialer, the dialer's id on the answerer, and where
    both monitors ended before the Connect (for `voice_active`)."""
    since = (dialer.monitor_size(), answerer.monitor_size())
    connect = CHILDREN.start(["gdbus", "call", "--session", "--timeout", "90", "-d", BUS[0], "-o", BUS[1],
                              "-m", f"{BUS[2]}.Connect", target], env=dialer.env, name="connect")
    prompt = r"PairingRequested \('([^']+)'"
    dialer_on_answerer = wait_for(f"PairingRequested on {answerer.label}",
                                  lambda: answerer.monitor_match(prompt, since[1]), 20)
    answerer_on_dialer = wait_for(f"{dialer.label}'s prompt", lambda: dialer.monitor_match(prompt, since[0]), 20)
    dialer.call("ConfirmPairing", answerer_on_dialer, "true")
    answerer.call("ConfirmPairing", dialer_on_answerer, "true")
    try:
        connect.wait(30)
    except subprocess.TimeoutExpired:
        raise BenchError("Connect did not return")
    CHILDREN.stop(connect)
    if connect.returncode != 0:
        raise BenchError(f"Connect from {dialer.label} failed")
    return answerer_on_dialer, dialer_on_answerer, since


def voice_active(daemon, peer, since=0):
    return daemon.monitor_match(r"VoiceStateChanged \('%s', 'active'\)" % re.escape(peer), since)


class PeerVoice:
    kind = "peervoice"
    # The kind with --base-bin: the same harness on another daemon (the build before a change).
    BASE = "peervoice-base"

    def __init__(self, pw, binary, frame_ms, impair, workdir, label, devices=None, extra_args=None):
        """`devices`: {side: (source, sink)} instead of A mic → B speaker; `extra_args`: {side: [options]}
        (bench/echo uses both)."""
        self.pw, self.workdir, self.label = pw, workdir, label
        self.relay, self.relay_stats = None, None
        devices = devices or {"a": (MIC, SPEAKER_A), "b": (MIC_B, SPEAKER)}
        self.peers = {side: PeerDaemon(pw, binary, workdir, f"{label}-{side}", f"bench-{side}", source, sink,
                                       ["--frame-ms", str(frame_ms)] + (extra_args or {}).get(side, []))
                      for side, (source, sink) in sorted(devices.items())}
        self.daemons = {side: peer.process for side, peer in self.peers.items()}
        self.ports = {side: self.peers[side].listen_port() for side in ("a", "b")}
        dial = self.ports["b"]
        if impair is not None:
            dial = free_port(socket.SOCK_STREAM)
            self.relay = start_relay(dial, self.ports["b"], impair, True, workdir, label)
        b_on_a, a_on_b, since = pair(self.peers["a"], self.peers["b"], f"ip:127.0.0.1:{dial}")
        wait_for("voice active on both sides", lambda: voice_active(self.peers["a"], b_on_a, since[0])
                 and voice_active(self.peers["b"], a_on_b, since[1]), 20)

    @property
    def pids(self):
        return {"sender": self.daemons["a"].pid, "receiver": self.daemons["b"].pid}

    def stop(self):
        """Stops everything; returns B's receive statistics line (logged when voice stops)."""
        for side in ("a", "b"):
            if side in self.peers:
                self.peers[side].stop_daemon()
        if self.relay:
            self.relay_stats = stop_relay(self.relay, self.workdir, self.label)
        for peer in self.peers.values():
            peer.stop_bus()
        stats = {}
        for side, peer in self.peers.items():
            line = peer.statistics()
            if line:
                stats[side] = line
        return stats


class GStreamer:
    kind = "gstreamer"

    def __init__(self, pw, frame_ms, impair, workdir, label, jitter_buffer_ms):
        self.pw, self.workdir, self.label, self.relay, self.relay_stats = pw, workdir, label, None, None
        receive_port = free_port()
        send_port = receive_port
        if impair is not None:
            send_port = free_port()
            self.relay = start_relay(send_port, receive_port, impair, False, workdir, label)
        caps = "application/x-rtp,media=audio,encoding-name=OPUS,clock-rate=48000,payload=96"
        self.receiver = CHILDREN.start(
            ["gst-launch-1.0", "-q", "udpsrc", f"port={receive_port}", f"caps={caps}",
             "!", "rtpjitterbuffer", f"latency={jitter_buffer_ms}", "!", "rtpopusdepay", "!", "opusdec", "plc=true",
             "!", "audioconvert", "!", "audioresample", "!", "audio/x-raw,rate=48000,channels=1",
             "!", "pipewiresink", f"target-object={SPEAKER}", "client-name=gst-recv", "sync=false"],
            env=pw.env, log_path=os.path.join(workdir, f"{label}-recv.log"), name="gst-recv")
        self.sender = CHILDREN.start(
            ["gst-launch-1.0", "-q", "pipewiresrc", f"target-object={MIC}", "client-name=gst-send",
             "!", "audio/x-raw,rate=48000,channels=1", "!", "audioconvert", "!", "audioresample",
             "!", "opusenc", "audio-type=voice", "bitrate=24000", f"frame-size={frame_ms}",
             "!", "rtpopuspay", "pt=96", "!", "udpsink", "host=127.0.0.1", f"port={send_port}", "sync=false", "async=false"],
            env=pw.env, log_path=os.path.join(workdir, f"{label}-send.log"), name="gst-send")
        wait_for("the GStreamer sender linked to the mic", lambda: pw.linked(MIC, "gst-send"), 20, 0.1)
        wait_for("the GStreamer receiver linked to the speaker", lambda: pw.linked("gst-recv", SPEAKER), 20, 0.1)

    @property
    def pids(self):
        return {"sender": self.sender.pid, "receiver": self.receiver.pid}

    def stop(self):
        # gst-launch with pipewiresink sometimes hangs on shutdown: SIGINT, then SIGKILL after 5 s.
        CHILDREN.stop(self.sender, signal.SIGINT)
        CHILDREN.stop(self.receiver, signal.SIGINT)
        if self.relay:
            self.relay_stats = stop_relay(self.relay, self.workdir, self.label)
        return {}


class GStreamerCall:
    """The same Opus/RTP elements as `GStreamer`, as a call: each side ONE gst-launch process that
    captures, encodes and sends AND receives, decodes and plays, like each peervoiced (A: the mic
    and bench-speaker-a; B: bench-mic-b and the speaker). With `dsp`, each side also cleans its
    microphone with gst-plugins-bad's `webrtcdsp` (webrtc-audio-processing 0.3, the library
    PeerVoice uses) set as PeerVoice's defaults (echo cancellation with the extended filter and
    delay-agnostic mode, moderate noise suppression, high-pass, voice detection, no gain control),
    hearing what its side plays through a `webrtcechoprobe` before its sink."""

    KINDS = {"gstreamer-call": False, "gstreamer-dsp": True}
    DSP = ("webrtcdsp", "echo-cancel=true", "extended-filter=true", "delay-agnostic=true", "noise-suppression=true",
           "noise-suppression-level=moderate", "echo-suppression-level=moderate", "high-pass-filter=true",
           "gain-control=false", "experimental-agc=false", "voice-detection=true")

    def __init__(self, pw, frame_ms, impair, workdir, label, jitter_buffer_ms, dsp):
        self.pw, self.workdir, self.label, self.relay, self.relay_stats = pw, workdir, label, None, None
        ports = {"a": free_port(), "b": free_port()}
        send_to = {"a": ports["b"], "b": ports["a"]}
        if impair is not None:  # A's voice through the relay, as for PeerVoice
            send_to["a"] = free_port()
            self.relay = start_relay(send_to["a"], ports["b"], impair, False, workdir, label)
        caps = "application/x-rtp,media=audio,encoding-name=OPUS,clock-rate=48000,payload=96"
        raw = "audio/x-raw,format=S16LE,rate=48000,channels=1"
        devices = {"a": (MIC, SPEAKER_A), "b": (MIC_B, SPEAKER)}
        self.processes = {}
        for side, (mic, speaker) in devices.items():
            probe = f"probe-{side}"
            send = ["pipewiresrc", f"target-object={mic}", f"client-name=gst-{side}-send", "!", raw, "!", "audioconvert",
                    "!", "audioresample", "!", raw]
            if dsp:
                # pipewiresrc marks every buffer discontinuous, and webrtcdsp then drops what it had
                # gathered of its 10 ms block (it never processes one): hand it whole 10 ms buffers.
                send += ["!", "audiobuffersplit", "output-buffer-duration=1/100", "!", *self.DSP, f"probe={probe}"]
            send += ["!", "opusenc", "audio-type=voice", "bitrate=24000", f"frame-size={frame_ms}", "!", "rtpopuspay", "pt=96",
                     "!", "udpsink", "host=127.0.0.1", f"port={send_to[side]}", "sync=false", "async=false"]
            receive = ["udpsrc", f"port={ports[side]}", f"caps={caps}", "!", "rtpjitterbuffer", f"latency={jitter_buffer_ms}",
                       "!", "rtpopusdepay", "!", "opusdec", "plc=true", "!", "audioconvert", "!", "audioresample", "!", raw]
            if dsp:
                receive += ["!", "webrtcechoprobe", f"name={probe}"]
            receive += ["!", "pipewiresink", f"target-object={speaker}", f"client-name=gst-{side}-recv", "sync=false"]
            self.processes[side] = CHILDREN.start(["gst-launch-1.0", "-q", *receive, *send], env=pw.env,
                                                  log_path=os.path.join(workdir, f"{label}-{side}.log"), name=f"gst-{side}")
        for side, (mic, speaker) in devices.items():
            wait_for(f"GStreamer {side} linked to its mic", lambda: pw.linked(mic, f"gst-{side}-send"), 20, 0.1)
            wait_for(f"GStreamer {side} linked to its speaker", lambda: pw.linked(f"gst-{side}-recv", speaker), 20, 0.1)

    @property
    def pids(self):
        return {"sender": self.processes["a"].pid, "receiver": self.processes["b"].pid}

    def stop(self):
        for p in self.processes.values():
            CHILDREN.stop(p, signal.SIGINT)
        if self.relay:
            self.relay_stats = stop_relay(self.relay, self.workdir, self.label)
        return {}


# ---------------------------------------------------------------------------------------------
# Runs


def measure(pw, system, path):
    tap = pw.tap(path)
    time.sleep(0.3)
    pids = system.pids
    before = {side: cpu_ticks(pid) for side, pid in pids.items()}
    threads_before = {side: thread_ticks(pid) for side, pid in pids.items()}
    t0 = time.monotonic()
    pw.speak(SPEECH)
    time.sleep(0.6)
    after = {side: cpu_ticks(pid) for side, pid in pids.items()}
    threads_after = {side: thread_ticks(pid) for side, pid in pids.items()}
    wall = time.monotonic() - t0
    CHILDREN.stop(tap, signal.SIGINT)
    result = analysis.analyze(path)
    result["cpu_pct"] = {side: (round(100.0 * (after[side] - before[side]) / CLK_TCK / wall, 2)
                                if before[side] is not None and after[side] is not None else None) for side in pids}
    result["cpu_threads_pct"] = {
        side: {name: round(100.0 * (ticks - threads_before[side].get(name, 0)) / CLK_TCK / wall, 2)
               for name, ticks in threads_after[side].items() if ticks - threads_before[side].get(name, 0) > 0}
        for side in pids}
    return result


def median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def receiver_counts(run):
    """B's voice statistics from its log line: received, late, lost, concealed, FEC-recovered,
    speaker underruns (playback cycles its ring could not fill)."""
    line = (run.get("daemon_statistics") or {}).get("b", "")
    counts = {}
    for key in ("received", "late", "merged", "lost", "concealed", "FEC-recovered", "accelerated", "expanded",
                "speaker underruns"):
        m = re.search(rf"{key} (\d+)", line)
        if m:
            counts[key] = int(m.group(1))
    return counts


def summarize(runs):
    ok = [r for r in runs if "error" not in r]
    lat = [r.get("latency_ms") for r in ok if r.get("latency_ms") is not None]
    spread = [r["window_max_ms"] - r["window_min_ms"] for r in ok if "window_max_ms" in r]
    # Every 0.5 s window of every run: what a listener hears most of the time, even from a system
    # whose delay wanders within a run (the global lag goes wherever the best stretch correlates).
    windows = [w for r in ok for w in r.get("window_latency_ms", [])]
    s = {
        "latency_ms": median(lat),
        "window_latency_median_ms": median(windows),
        "latency_min_ms": min(lat) if lat else None,
        "latency_max_ms": max(lat) if lat else None,
        "window_spread_ms": median(spread),
        "xcorr": median([r.get("xcorr") for r in ok]),
        "pesq_wb": median([r.get("pesq_wb") for r in ok]),
        "stoi": median([r.get("stoi") for r in ok]),
        "cpu_sender_pct": median([r["cpu_pct"].get("sender") for r in ok]),
        "cpu_receiver_pct": median([r["cpu_pct"].get("receiver") for r in ok]),
        "runs_ok": len(ok),
        "runs": len(runs),
    }
    if s["cpu_sender_pct"] is not None and s["cpu_receiver_pct"] is not None:
        s["cpu_total_pct"] = round(s["cpu_sender_pct"] + s["cpu_receiver_pct"], 2)
    threads = {}
    for side in ("sender", "receiver"):
        names = set()
        for r in ok:
            names |= set(r.get("cpu_threads_pct", {}).get(side, {}))
        threads[side] = {n: median([r.get("cpu_threads_pct", {}).get(side, {}).get(n, 0) for r in ok]) for n in sorted(names)}
    s["cpu_threads_pct"] = threads
    counts = [receiver_counts(r) for r in ok]
    counts = [c for c in counts if c.get("received")]
    if counts:
        s["late_pct"] = median([100.0 * c.get("late", 0) / c["received"] for c in counts])
        s["concealed_per_received_pct"] = median([100.0 * c.get("concealed", 0) / c["received"] for c in counts])
        s["speaker_underruns"] = median([c.get("speaker underruns") for c in counts])
        s["merged_pct"] = median([100.0 * c.get("merged", 0) / c["received"] for c in counts])
        s["stretched_pct"] = median([100.0 * (c.get("accelerated", 0) + c.get("expanded", 0)) / c["received"] for c in counts])
    s["talkspurt_pesq_wb"] = analysis.by_talkspurt([r.get("talkspurt_pesq_wb") or [] for r in ok], median)
    p99 = [r["relay"]["delay_p99_ms"] for r in ok if (r.get("relay") or {}).get("delay_p99_ms") is not None]
    s["relay_p99_ms"] = median(p99)
    return s


def fmt(v, spec="{:.1f}"):
    return "-" if v is None else spec.format(v)


SYSTEMS = ("peervoice", PeerVoice.BASE, "gstreamer", *GStreamerCall.KINDS)


def ideal_ms(results, f, cond):
    """The ideal playout: the floor plus the relay's 99th-percentile one-way delay (measured by
    the relay, median over every run of the condition); on a clean link, the floor."""
    if CONDITIONS[cond] is None:
        return FLOOR_MS[f]
    p99 = [results[k]["summary"].get("relay_p99_ms") for k in (f"f{f}-{cond}-{kind}" for kind in SYSTEMS) if k in results]
    p99 = median([v for v in p99 if v is not None])
    return None if p99 is None else round(FLOOR_MS[f] + p99, 1)


def summary(results, f, cond, kind):
    return results.get(f"f{f}-{cond}-{kind}", {}).get("summary")


def print_table(results, frames):
    print()
    print("PeerVoice vs GStreamer Opus/RTP: medians of the runs (each run a fresh start); latency = mouth-to-ear in ONE")
    print("graph at quantum 256 (range over runs; win = median over the 0.5 s windows of all runs); ideal = floor + the")
    print("relay's p99 one-way delay (x = latency / ideal); dPESQ = PESQ-WB minus the same system's clean PESQ-WB;")
    print("CPU = % of one core; late/merg/conc/str = PeerVoice receiver's late packets, merged late packets, concealment")
    print("outputs and stretched frames per packet received (%), under = its speaker underruns (its log)")
    header = (f"{'frame':>5} {'network':<11} {'system':<14} {'lat ms':>7} {'range':>11} {'win':>6} {'ideal':>6} {'x':>5} "
              f"{'PESQ-WB':>7} {'dPESQ':>6} {'STOI':>5} {'CPU tx':>6} {'CPU rx':>6} {'sum':>5} {'late%':>5} {'merg%':>5} "
              f"{'conc%':>5} {'str%':>5} {'under':>5}")
    print(header)
    print("-" * len(header))
    for f in frames:
        for cond in CONDITIONS:
            ideal = ideal_ms(results, f, cond)
            for kind in SYSTEMS:
                s = summary(results, f, cond, kind)
                if not s:
                    continue
                clean = summary(results, f, "clean", kind) or {}
                dpesq = (s["pesq_wb"] - clean["pesq_wb"]) if s.get("pesq_wb") is not None and clean.get("pesq_wb") is not None else None
                ratio = s["latency_ms"] / ideal if s.get("latency_ms") is not None and ideal else None
                rng = f"{fmt(s['latency_min_ms'])}-{fmt(s['latency_max_ms'])}"
                print(f"{f:>5} {cond:<11} {kind:<14} {fmt(s['latency_ms']):>7} {rng:>11} "
                      f"{fmt(s.get('window_latency_median_ms')):>6} {fmt(ideal):>6} {fmt(ratio, '{:.2f}'):>5} "
                      f"{fmt(s['pesq_wb'], '{:.2f}'):>7} {fmt(dpesq, '{:+.2f}'):>6} {fmt(s['stoi'], '{:.2f}'):>5} "
                      f"{fmt(s['cpu_sender_pct']):>6} {fmt(s['cpu_receiver_pct']):>6} {fmt(s.get('cpu_total_pct')):>5} "
                      f"{fmt(s.get('late_pct'), '{:.1f}'):>5} {fmt(s.get('merged_pct'), '{:.1f}'):>5} "
                      f"{fmt(s.get('concealed_per_received_pct'), '{:.0f}'):>5} {fmt(s.get('stretched_pct'), '{:.1f}'):>5} "
                      f"{fmt(s.get('speaker_underruns'), '{:.0f}'):>5}")
        print(f"{'':>5} floor (capture quantum + frame + Opus lookahead + playback quantum): {FLOOR_MS[f]} ms")
    print()
    print("PESQ-WB by talkspurt of the speech (each at its own lag; medians of the runs; in brackets the change")
    print("against the same system's clean figure for that talkspurt): where in the call the quality goes")
    for f in frames:
        for cond in CONDITIONS:
            for kind in SYSTEMS:
                s = summary(results, f, cond, kind)
                if not s or not s.get("talkspurt_pesq_wb"):
                    continue
                clean = (summary(results, f, "clean", kind) or {}).get("talkspurt_pesq_wb") or []
                cells = [fmt(v, "{:.2f}") + (f" ({v - clean[i]:+.2f})" if cond != "clean" and i < len(clean)
                                             and None not in (v, clean[i]) else "")
                         for i, v in enumerate(s["talkspurt_pesq_wb"])]
                print(f"{f:>5} {cond:<11} {kind:<14} " + "  ".join(f"{c:<13}" for c in cells))
    print()


def evaluate(results, frames):
    """Issue 20's targets; `before` is peervoice-base when it ran (else those checks are skipped)."""
    checks = []

    def get(f, cond, kind, key):
        return (summary(results, f, cond, kind) or {}).get(key)

    def check(target, ours, other, met):
        checks.append({"target": target, "peervoice": ours, "baseline": other, "met": bool(met)})

    base = PeerVoice.BASE
    for f in frames:
        lat = get(f, "clean", "peervoice", "latency_ms")
        check(f"{f} ms frames: clean latency <= 1.05 x floor ({round(1.05 * FLOOR_MS[f], 1)} ms)", lat, FLOOR_MS[f],
              lat is not None and lat <= 1.05 * FLOOR_MS[f])
        clean = get(f, "clean", "peervoice", "pesq_wb")
        if get(f, "clean", base, "pesq_wb") is not None:
            before = get(f, "clean", base, "pesq_wb")
            check(f"{f} ms frames: clean PESQ-WB >= before", clean, before, clean is not None and clean >= before)
        ideal = ideal_ms(results, f, "j30")
        lat, pesq = get(f, "j30", "peervoice", "latency_ms"), get(f, "j30", "peervoice", "pesq_wb")
        if ideal is not None:
            check(f"{f} ms frames, j30: latency <= 1.02 x ideal ({round(1.02 * ideal, 1)} ms)", lat, ideal,
                  lat is not None and lat <= 1.02 * ideal)
        check(f"{f} ms frames, j30: PESQ-WB within 0.3 of own clean", pesq, clean,
              pesq is not None and clean is not None and pesq >= clean - 0.3)
        if get(f, "j30-loss10", base, "pesq_wb") is not None:
            for key, name, better in (("pesq_wb", "PESQ-WB", lambda o, b: o >= b), ("latency_ms", "latency", lambda o, b: o <= b)):
                ours, before = get(f, "j30-loss10", "peervoice", key), get(f, "j30-loss10", base, key)
                check(f"{f} ms frames, j30-loss10: {name} {'>=' if key == 'pesq_wb' else '<='} before", ours, before,
                      ours is not None and before is not None and better(ours, before))
        ours = get(f, "clean", "peervoice", "cpu_total_pct")
        for kind in ("gstreamer", *GStreamerCall.KINDS):
            theirs = get(f, "clean", kind, "cpu_total_pct")
            if theirs is None and kind != "gstreamer":
                continue
            check(f"{f} ms frames, clean: CPU of both PeerVoice processes <= {kind} A + B", ours, theirs,
                  ours is not None and theirs is not None and ours <= theirs)
    print("Targets (issue 20; 'baseline' is the reference named in each line)")
    for c in checks:
        print(f"  [{'met' if c['met'] else 'MISSED'}] {c['target']}: PeerVoice {fmt(c['peervoice'], '{:.2f}')}, "
              f"reference {fmt(c['baseline'], '{:.2f}')}")
    return checks


def plot(results, frames, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        log(f"no plot: {e}")
        return
    conds = list(CONDITIONS)
    fig, axes = plt.subplots(len(frames), 2, figsize=(10, 3.2 * len(frames)), squeeze=False)
    for row, f in enumerate(frames):
        for col, (key, title) in enumerate((("latency_ms", "mouth-to-ear latency (ms)"), ("pesq_wb", "PESQ-WB"))):
            ax = axes[row][col]
            kinds = [k for k in SYSTEMS if any(f"f{f}-{c}-{k}" in results for c in conds)]
            width = 0.8 / max(1, len(kinds))
            for i, kind in enumerate(kinds):
                vals = [results.get(f"f{f}-{c}-{kind}", {}).get("summary", {}).get(key) or 0 for c in conds]
                ax.bar([x + (i - (len(kinds) - 1) / 2) * width for x in range(len(conds))], vals, width, label=kind)
            if key == "latency_ms":
                ax.axhline(FLOOR_MS[f], color="gray", linestyle=":", label=f"floor {FLOOR_MS[f]} ms")
                ax.axhline(CLEAN_TARGET_MS[f], color="red", linestyle="--", linewidth=0.8, label=f"clean target {CLEAN_TARGET_MS[f]} ms")
            top = ax.get_ylim()[1]
            ax.set_ylim(0, top * 1.35)  # room for the legend above the bars
            ax.set_xticks(range(len(conds)))
            ax.set_xticklabels(conds)
            ax.set_title(f"{f} ms frames: {title}", fontsize=10)
            ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    log(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the (release) peervoiced to run")
    ap.add_argument("--runs", type=int, default=3, help="measured runs per configuration (default 3)")
    ap.add_argument("--frames", default="20,10", help="Opus frame lengths in ms (default 20,10)")
    ap.add_argument("--conditions", default=",".join(CONDITIONS), help=f"networks (default {','.join(CONDITIONS)})")
    ap.add_argument("--systems", default=None,
                    help="default peervoice,gstreamer; with --base-bin peervoice,peervoice-base,gstreamer; "
                         "also gstreamer-call, gstreamer-dsp (a call: both directions in each process; with webrtcdsp)")
    ap.add_argument("--base-bin", help="a second peervoiced (e.g. the commit before a change), run as peervoice-base "
                                       "in the same session, interleaved")
    ap.add_argument("--gst-latency", type=int, default=40,
                    help="the baseline's rtpjitterbuffer latency in ms (default 40, the baseline the targets name)")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds of running before the first run (default 2)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "voice.json"))
    ap.add_argument("--keep-temp", action="store_true", help="keep the work directory (logs, taps)")
    ap.add_argument("--replot", action="store_true", help="only redraw the PNG and the table (summaries recomputed) from --out's JSON")
    ap.add_argument("--peervoice-args", default="",
                    help="more options for every peervoiced, e.g. '--no-echo-cancel --no-noise-suppression' "
                         "(the capture processing adds ~14 ms and changes PESQ; off, the playout is measured alone)")
    a = ap.parse_args()
    daemon_args = shlex.split(a.peervoice_args)
    if a.replot:
        with open(a.out) as f:
            doc = json.load(f)
        frames = doc["parameters"]["frames"]
        for configuration in doc["results"].values():  # with this version's summary
            configuration["summary"] = summarize(configuration["runs"])
        print_table(doc["results"], frames)
        evaluate(doc["results"], frames)
        plot(doc["results"], frames, os.path.splitext(a.out)[0] + ".png")
        return 0
    frames = [int(x) for x in a.frames.split(",")]
    conditions = a.conditions.split(",")
    systems = (a.systems or ("peervoice,peervoice-base,gstreamer" if a.base_bin else "peervoice,gstreamer")).split(",")
    if PeerVoice.BASE in systems and not a.base_bin:
        ap.error("peervoice-base needs --base-bin")
    for c in conditions:
        if c not in CONDITIONS:
            ap.error(f"unknown condition {c}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    workdir = tempfile.mkdtemp(prefix="pv-bench-voice-")
    log(f"work directory {workdir}")
    results = {}
    started = datetime.datetime.now().isoformat(timespec="seconds")
    load_before = os.getloadavg()
    pw = None
    status = 0
    try:
        pw = PipeWire(os.path.join(workdir, "pw"))
        for f in frames:
            for cond in conditions:
                for kind in systems:
                    label = f"f{f}-{cond}-{kind}"
                    log(f"{label}: starting")
                    impair = CONDITIONS[cond]
                    entry = {"frame_ms": f, "network": cond, "system": kind, "impairment": impair, "runs": []}
                    for r in range(a.runs):
                        # Each run starts afresh: what a start leaves behind (GStreamer's sink keeps a
                        # backlog queued before WirePlumber linked it) varies from start to start.
                        system, stats = None, None
                        try:
                            if kind == "gstreamer":
                                system = GStreamer(pw, f, impair, workdir, f"{label}-{r + 1}", a.gst_latency)
                            elif kind in GStreamerCall.KINDS:
                                system = GStreamerCall(pw, f, impair, workdir, f"{label}-{r + 1}", a.gst_latency,
                                                       GStreamerCall.KINDS[kind])
                            else:
                                system = PeerVoice(pw, a.base_bin if kind == PeerVoice.BASE else a.bin, f, impair,
                                                   workdir, f"{label}-{r + 1}", extra_args={"a": daemon_args, "b": daemon_args})
                            time.sleep(a.settle)
                            res = measure(pw, system, os.path.join(workdir, f"{label}-run{r + 1}.wav"))
                        except BenchError as e:
                            res = {"error": str(e)}
                            status = 1
                        finally:
                            if system is not None:
                                stats = system.stop()
                        if stats:
                            res["daemon_statistics"] = stats
                        if system is not None and system.relay_stats:
                            res["relay"] = system.relay_stats
                        log(f"{label} run {r + 1}: " + json.dumps({k: v for k, v in res.items() if k != "window_latency_ms"}))
                        entry["runs"].append(res)
                    entry["summary"] = summarize(entry["runs"])
                    results[label] = entry
    except Terminated as e:
        log(f"stopped: {e}")
        status = 130
    except BenchError as e:
        log(f"cannot run: {e}")
        status = 1
    finally:
        CHILDREN.stop_all()
        if pw is not None:
            pw.stop()
        if not a.keep_temp:
            subprocess.run(["rm", "-rf", workdir])

    print_table(results, frames)
    checks = evaluate(results, frames)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    doc = {
        "benchmark": "voice", "started": started, "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                                              "load_before": load_before, "load_after": os.getloadavg()},
        "parameters": {"runs": a.runs, "frames": frames, "conditions": conditions, "settle_s": a.settle, "quantum": QUANTUM,
                       "speech": os.path.relpath(SPEECH, ROOT), "binary": a.bin, "base_binary": a.base_bin,
                       "peervoice_args": daemon_args,
                       "systems": systems,
                       "gstreamer": f"opusenc audio-type=voice bitrate=24000; rtpjitterbuffer latency={a.gst_latency}; opusdec plc=true; pipewiresink sync=false"},
        "floor_ms": FLOOR_MS, "targets": checks, "results": results,
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    log(f"wrote {a.out}")
    plot(results, frames, os.path.splitext(a.out)[0] + ".png")
    return status


if __name__ == "__main__":
    sys.exit(main())
