#!/usr/bin/env python3
"""App channels: how fast a stream moves, and what a saturating one does to a call (`make bench-channels`).

Loopback (throughput). Each run starts two release peervoiced afresh on private buses, pairs them
over 127.0.0.1, and moves --loopback-mib MiB of zeros from A to B through:
  peervoice   `peervoicectl open B org.example.Bench < data` into `peervoicectl listen ... --once > /dev/null`
              (the apps a user gets: the CLI's bridges, each stream a socket from the daemon); 8 streams
              at once: 8 `open`s of 1/8 each into one `listen -- sh -c 'cat > /dev/null'`, all on ONE link
  socat       raw TCP, no encryption: `socat -u - TCP:127.0.0.1:P` into `socat -u TCP-LISTEN:P OPEN:/dev/null`
              (8 streams: 8 connections, the listener forking)
  ssh         OpenSSH 9.2 (chacha20-poly1305@openssh.com, its default here) to a private sshd on 127.0.0.1:
              `ssh host 'cat > /dev/null' < data`; 8 streams: 8 sessions multiplexed over ONE connection
              (ControlMaster), as PeerVoice's 8 streams share one link
The systems are interleaved within each run; MiB/s = the data / the wall time until every sender has
exited (a sender exits once the receiver has taken everything). Medians over the runs.

Bottleneck (a call during a bulk transfer). Three network namespaces A - R - B joined by veth pairs;
R forwards and shapes each direction with tbf (--rate-mbit, 20 by default, a tail-drop queue of
--queue-ms, 100 by default: a home Wi-Fi router's buffer). The queue sits in R, not in the sender's own
qdisc, where TCP small queues would keep it short. A and B use TCP Reno (loss-based, like Debian's
default CUBIC: a bulk TCP fills the router's buffer; this machine's default BBR does not, and CUBIC
may not be chosen inside a namespace here). One private headless PipeWire (bench/voice's harness):
A speaks Tests/Fixtures/speech.wav into its microphone, B's speaker is recorded with it, mouth-to-ear
latency by cross-correlation and PESQ-WB as `make bench-voice` measures them, with the daemons' default
settings (20 ms frames, capture processing on). Each run: fresh daemons in A and B, paired across R,
voice started; then, interleaved:
  idle        the call alone
  peervoice   the call while `peervoicectl open` streams zeros from A to B as fast as it can
              (the stream's rate is measured at B over the speech)
  transfer    the call while `peervoicectl send-file` sends a 1 GiB file from A to B (issue 30: transfers
              ride one app stream; B accepts it; the rate is B's Transferred property over the speech)
  tcp-flood   reference: the call while socat pushes zeros over plain TCP from A to B (what a bulk
              transfer without delay-based rate control does to the call)
Targets (issue 29): loopback peervoice >= ssh (1 and 8 streams); through the bottleneck the call's median
latency rises by <= 10 ms and PESQ-WB falls by <= 0.1 while the stream gets >= 80 % of the rate.

Prints two tables, writes bench/results/channels.json; asserts nothing (exit status non-zero only when a
run could not be carried out). Needs root (network namespaces), socat, openssh-server, pipewire, and the
bench venv (numpy, scipy, pesq).
"""
import argparse
import datetime
import importlib.util
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESULTS = os.path.join(ROOT, "bench", "results")
spec = importlib.util.spec_from_file_location("voicebench", os.path.join(ROOT, "bench", "voice", "run.py"))
voice = importlib.util.module_from_spec(spec)
spec.loader.exec_module(voice)
CHILDREN, BenchError, log, wait_for = voice.CHILDREN, voice.BenchError, voice.log, voice.wait_for
CHANNEL = "org.example.Bench"
SYSTEMS = ("peervoice", "socat", "ssh")
CONDITIONS = ("idle", "peervoice", "transfer", "tcp-flood")


def run(args, env=None, timeout=60, check=True):
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise BenchError(f"{' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
    return r


def median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 2) if values else None


class NoPipeWire:
    """For daemons that need no audio (the loopback part): the environment as it is."""
    env = dict(os.environ)


def start_pair(pw, binary, workdir, label, listen=("127.0.0.1:0", "127.0.0.1:0"), launchers=((), ()), voice_on=False,
               extra=()):
    """Two peervoiced (A and B) on private buses, paired: A dials B. Returns (a, b, b's id on A)."""
    options = ([] if voice_on else ["--no-auto-voice"]) + list(extra)
    devices = {"a": (voice.MIC, voice.SPEAKER_A), "b": (voice.MIC_B, voice.SPEAKER)}
    peers = {side: voice.PeerDaemon(pw, binary, workdir, f"{label}-{side}", f"bench-{side}", *devices[side], options,
                                    listen=address, launcher=launcher)
             for side, address, launcher in zip(("a", "b"), listen, launchers)}
    port = peers["b"].listen_port()
    b_on_a, a_on_b, since = voice.pair(peers["a"], peers["b"], f"ip:{peers['b'].listen_host}:{port}")
    if voice_on:
        wait_for("voice active on both sides", lambda: voice.voice_active(peers["a"], b_on_a, since[0])
                 and voice.voice_active(peers["b"], a_on_b, since[1]), 30)
    return peers["a"], peers["b"], b_on_a


def ctl(bin_dir, daemon, args, stdin=None, stdout=None, name="ctl"):
    return subprocess.Popen([os.path.join(bin_dir, "peervoicectl"), *args], env=daemon.env, stdin=stdin or subprocess.DEVNULL,
                            stdout=stdout or subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_registered(daemon, channel):
    wait_for(f"{channel} registered", lambda: f"registered {channel}" in open(daemon.log_path, errors="replace").read(), 10)


# ---------------------------------------------------------------------------------------------
# Loopback


class OpenSSH:
    """A private sshd on 127.0.0.1 with its own host key, and a client key it accepts."""

    def __init__(self, workdir):
        self.dir = os.path.join(workdir, "ssh")
        os.makedirs(self.dir)
        for key in ("host", "client"):
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(self.dir, key)])
        shutil.copy(os.path.join(self.dir, "client.pub"), os.path.join(self.dir, "authorized_keys"))
        self.port = voice.free_port(voice.socket.SOCK_STREAM)
        config = os.path.join(self.dir, "sshd_config")
        with open(config, "w") as f:
            f.write(f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.dir}/host\n"
                    f"AuthorizedKeysFile {self.dir}/authorized_keys\nPasswordAuthentication no\nPermitRootLogin yes\n"
                    f"StrictModes no\nUsePAM no\nPidFile {self.dir}/sshd.pid\nSubsystem sftp /usr/lib/openssh/sftp-server\n")
        os.makedirs("/run/sshd", exist_ok=True)
        self.process = CHILDREN.start(["/usr/sbin/sshd", "-D", "-f", config, "-E", os.path.join(self.dir, "log")], name="sshd")
        self.client = ["ssh", "-p", str(self.port), "-i", os.path.join(self.dir, "client"), "-o", "StrictHostKeyChecking=no",
                       "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"]
        wait_for("sshd", lambda: run(self.client + ["127.0.0.1", "true"], check=False).returncode == 0, 10, 0.1)
        self.control = os.path.join(self.dir, "control")

    def start_master(self):
        run(self.client + ["-M", "-S", self.control, "-f", "-N", "127.0.0.1"])

    def stop_master(self):
        run(self.client + ["-S", self.control, "-O", "exit", "127.0.0.1"], check=False)

    def stop(self):
        CHILDREN.stop(self.process)


def timed(senders, receivers=(), timeout=600):
    """Seconds until every sender has exited (each must exit 0)."""
    start = time.monotonic()
    for p in senders:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise BenchError("a sender did not finish")
        if p.returncode != 0:
            raise BenchError(f"a sender exited {p.returncode}: {p.stderr.read().decode(errors='replace')[-300:] if p.stderr else ''}")
    elapsed = time.monotonic() - start
    for p in receivers:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
    return elapsed


def zeros(nbytes):
    """A pipe of `nbytes` zero bytes (head's reads are cheap next to what is measured)."""
    return subprocess.Popen(["head", "-c", str(nbytes), "/dev/zero"], stdout=subprocess.PIPE).stdout


def loopback_run(args, workdir, index, ssh):
    nbytes = args.loopback_mib << 20
    label = f"loopback-{index}"
    a, b, b_id = start_pair(NoPipeWire, os.path.join(args.bin_dir, "peervoiced"), workdir, label)
    result = {}
    try:
        for streams in (1, 8):
            part = nbytes // streams
            for system in SYSTEMS:
                if system == "peervoice":
                    channel = f"{CHANNEL}{streams}"
                    listen = ctl(args.bin_dir, b, ["listen", channel, "--once"] if streams == 1 else
                                 ["listen", channel, "--", "sh", "-c", "cat > /dev/null"])
                    wait_registered(b, channel)
                    opens = [ctl(args.bin_dir, a, ["open", b_id, channel], stdin=zeros(part)) for _ in range(streams)]
                    elapsed = timed(opens, [listen] if streams == 1 else [])
                    if streams > 1:
                        listen.terminate()
                        listen.wait(10)
                elif system == "socat":
                    port = voice.free_port(voice.socket.SOCK_STREAM)
                    listen = subprocess.Popen(["socat", "-u", f"TCP-LISTEN:{port},reuseaddr" + (",fork" if streams > 1 else ""),
                                               "OPEN:/dev/null"], stderr=subprocess.PIPE)
                    time.sleep(0.2)
                    sends = [subprocess.Popen(["socat", "-u", "-", f"TCP:127.0.0.1:{port}"], stdin=zeros(part), stderr=subprocess.PIPE)
                             for _ in range(streams)]
                    elapsed = timed(sends, [listen] if streams == 1 else [])
                    if streams > 1:
                        listen.terminate()
                        listen.wait(10)
                else:
                    extra = []
                    if streams > 1:
                        ssh.start_master()
                        extra = ["-S", ssh.control]
                    sends = [subprocess.Popen(ssh.client + extra + ["127.0.0.1", "cat > /dev/null"], stdin=zeros(part),
                                              stderr=subprocess.PIPE) for _ in range(streams)]
                    elapsed = timed(sends)
                    if streams > 1:
                        ssh.stop_master()
                mibs = round(nbytes / elapsed / (1 << 20), 1)
                result[f"{system}-{streams}"] = mibs
                log(f"{label}: {system}, {streams} stream{'s' if streams > 1 else ''}: {mibs} MiB/s")
    finally:
        for peer in (a, b):
            peer.stop_daemon()
            peer.stop_bus()
    return result


# ---------------------------------------------------------------------------------------------
# Bottleneck


class Namespaces:
    """A - R - B, each direction shaped in R."""

    def __init__(self, rate_mbit, queue_ms):
        tag = f"pvbc{os.getpid() % 100000}"
        self.a, self.r, self.b = f"{tag}a", f"{tag}r", f"{tag}b"
        self.addr_a, self.addr_b = "10.89.1.1", "10.89.2.1"
        self.created = []
        try:
            for ns in (self.a, self.r, self.b):
                run(["ip", "netns", "add", ns])
                self.created.append(ns)
                run(["ip", "-n", ns, "link", "set", "lo", "up"])
            run(["ip", "link", "add", f"{tag}ca", "type", "veth", "peer", "name", f"{tag}ra"])
            run(["ip", "link", "add", f"{tag}cb", "type", "veth", "peer", "name", f"{tag}rb"])
            for dev, ns in ((f"{tag}ca", self.a), (f"{tag}ra", self.r), (f"{tag}rb", self.r), (f"{tag}cb", self.b)):
                run(["ip", "link", "set", dev, "netns", ns])
            for ns, dev, address in ((self.a, f"{tag}ca", f"{self.addr_a}/24"), (self.r, f"{tag}ra", "10.89.1.254/24"),
                                     (self.r, f"{tag}rb", "10.89.2.254/24"), (self.b, f"{tag}cb", f"{self.addr_b}/24")):
                run(["ip", "-n", ns, "addr", "add", address, "dev", dev])
                run(["ip", "-n", ns, "link", "set", dev, "up"])
            run(["ip", "-n", self.a, "route", "add", "default", "via", "10.89.1.254"])
            run(["ip", "-n", self.b, "route", "add", "default", "via", "10.89.2.254"])
            run(["ip", "netns", "exec", self.r, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
            # The buffer holds queue_ms of the rate; the bucket one 1500-byte packet and a bit.
            for dev in (f"{tag}ra", f"{tag}rb"):
                run(["ip", "netns", "exec", self.r, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{rate_mbit}mbit",
                     "burst", "4kb", "latency", f"{queue_ms}ms"])
            for ns in (self.a, self.b):
                run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_congestion_control=reno"])
        except BenchError:
            self.delete()
            raise

    def launcher(self, ns):
        return ["ip", "netns", "exec", ns]

    def delete(self):
        for ns in self.created:
            run(["ip", "netns", "del", ns], check=False)
        self.created = []


COUNTER = r"""
import sys, time
out = open(sys.argv[1], "w", buffering=1)
total, last = 0, 0.0
while True:
    data = sys.stdin.buffer.read1(1 << 20)
    if not data:
        break
    total += len(data)
    now = time.monotonic()
    if now - last >= 0.1:
        out.write("%.3f %d\n" % (now, total))
        last = now
"""


def rate_between(samples_path, start, end):
    """Bytes per second the counter saw between two monotonic times."""
    samples = []
    with open(samples_path) as f:
        for line in f:
            t, n = line.split()
            samples.append((float(t), int(n)))
    inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < 2:
        return None
    (t0, n0), (t1, n1) = inside[0], inside[-1]
    return (n1 - n0) / (t1 - t0)


class Call:
    """The bench/voice `measure` wants a system with the sender's and receiver's pids."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    @property
    def pids(self):
        return {"sender": self.a.pid, "receiver": self.b.pid}


SAMPLER = r"""
import subprocess, sys, time
out = open(sys.argv[1], "w", buffering=1)
while True:
    r = subprocess.run(["busctl", "--user", "get-property", "org.example.PeerVoice", sys.argv[2],
                        "org.example.PeerVoice.Transfer", "Transferred"], capture_output=True, text=True)
    if r.returncode == 0:
        out.write("%.3f %s\n" % (time.monotonic(), r.stdout.split()[1]))
    time.sleep(0.25)
"""


def send_file(bin_dir, a, b, b_id, workdir, label, counter):
    """`peervoicectl send-file` of 1 GiB (written zeros, not sparse) from A; B accepts it (its first
    transfer object: fresh daemons) and a sampler records B's Transferred. Returns (sender, sampler)."""
    source = os.path.join(workdir, "transfer.bin")
    if not os.path.exists(source):
        run(["sh", "-c", f"head -c {1 << 30} /dev/zero > '{source}'"], timeout=300)
    sender = ctl(bin_dir, a, ["send-file", b_id, source])
    path = "/org/example/PeerVoice/transfers/1"
    wait_for("the transfer offered to B", lambda: run([os.path.join(bin_dir, "peervoicectl"), "transfer", "accept", "1"],
                                                     env=b.env, check=False).returncode == 0, 15, 0.2)
    sampler = subprocess.Popen([sys.executable, "-c", SAMPLER, counter, path], env=b.env)
    return sender, sampler


def bottleneck_run(args, pw, nets, workdir, index, conditions=CONDITIONS):
    label = f"bottleneck-{index}"
    downloads = os.path.join(workdir, f"{label}-downloads")
    a, b, b_id = start_pair(pw, os.path.join(args.bin_dir, "peervoiced"), workdir, label,
                            listen=(f"{nets.addr_a}:0", f"{nets.addr_b}:0"),
                            launchers=(nets.launcher(nets.a), nets.launcher(nets.b)), voice_on=True,
                            extra=list(args.daemon_args) + ["--download-dir", downloads])
    results = {}
    try:
        time.sleep(args.settle)
        for condition in conditions:
            sender, sink, counter = None, None, os.path.join(workdir, f"{label}-{condition}.rate")
            try:
                if condition == "peervoice":
                    sink = subprocess.Popen(f"exec '{args.bin_dir}/peervoicectl' listen {CHANNEL} --once | "
                                            f"{sys.executable} -c '{COUNTER}' {counter}", shell=True, env=b.env)
                    wait_registered(b, CHANNEL)
                    sender = ctl(args.bin_dir, a, ["open", b_id, CHANNEL], stdin=open("/dev/zero", "rb"))
                elif condition == "transfer":
                    sender, sink = send_file(args.bin_dir, a, b, b_id, workdir, label, counter)
                elif condition == "tcp-flood":
                    port = 47999
                    sink = subprocess.Popen(nets.launcher(nets.b) + ["sh", "-c", f"exec socat -u TCP-LISTEN:{port},reuseaddr - | "
                                            f"{sys.executable} -c '{COUNTER}' {counter}"])
                    time.sleep(0.3)
                    sender = subprocess.Popen(nets.launcher(nets.a) + ["socat", "-u", "OPEN:/dev/zero", f"TCP:{nets.addr_b}:{port}"])
                if sender is not None:
                    time.sleep(args.ramp)
                start = time.monotonic()
                res = voice.measure(pw, Call(a, b), os.path.join(workdir, f"{label}-{condition}.wav"))
                end = time.monotonic()
                if sender is not None:
                    rate = rate_between(counter, start, end)
                    res["stream_mbit"] = None if rate is None else round(rate * 8 / 1e6, 2)
            except BenchError as e:
                res = {"error": str(e)}
            finally:
                for p in (sender, sink):
                    if p is not None and p.poll() is None:
                        p.terminate()
                        try:
                            p.wait(10)
                        except subprocess.TimeoutExpired:
                            p.kill()
                # peervoicectl ended by a signal other than SIGINT leaves its transfer running: it is cancelled.
                if condition == "transfer":
                    run([os.path.join(args.bin_dir, "peervoicectl"), "transfer", "cancel", "1"], env=b.env, check=False)
                # What the flood's sink leaves in the namespace (socat under sh) goes with its group.
                if condition == "tcp-flood":
                    run(["ip", "netns", "exec", nets.b, "pkill", "-f", f"TCP-LISTEN:47999"], check=False)
            results[condition] = res
            log(f"{label}: {condition}: latency {res.get('latency_ms')} ms, PESQ-WB {res.get('pesq_wb')}, "
                f"stream {res.get('stream_mbit')} Mbit/s{(' error ' + res['error']) if 'error' in res else ''}")
            time.sleep(1.0)  # the queue drains before the next condition
    finally:
        for peer in (a, b):
            peer.stop_daemon()
            peer.stop_bus()
    return results


# ---------------------------------------------------------------------------------------------


def print_tables(loopback, bottleneck, rate_mbit):
    if loopback:
        print()
        print("Loopback: MiB/s from A to B (median of the runs, each run fresh daemons; range in brackets)")
        header = f"{'system':<10} {'1 stream':>18} {'8 streams':>18} {'1: x ssh':>8} {'8: x ssh':>8}"
        print(header)
        print("-" * len(header))
        for system in SYSTEMS:
            cells = []
            for streams in (1, 8):
                values = [r.get(f"{system}-{streams}") for r in loopback if r.get(f"{system}-{streams}")]
                cells.append(f"{median(values)} [{min(values)}-{max(values)}]" if values else "-")
            ratios = []
            for streams in (1, 8):
                mine = median([r.get(f"{system}-{streams}") for r in loopback])
                ssh = median([r.get(f"ssh-{streams}") for r in loopback])
                ratios.append(f"{mine / ssh:.2f}" if mine and ssh else "-")
            print(f"{system:<10} {cells[0]:>18} {cells[1]:>18} {ratios[0]:>8} {ratios[1]:>8}")
    if bottleneck:
        print()
        print(f"Through a {rate_mbit} Mbit/s bottleneck (tbf in a router namespace): the call A -> B (medians of the runs)")
        header = f"{'condition':<11} {'latency ms':>10} {'+ms':>6} {'PESQ-WB':>8} {'dPESQ':>7} {'stream Mbit/s':>13} {'% of rate':>9}"
        print(header)
        print("-" * len(header))
        idle = {k: median([r["idle"].get(k) for r in bottleneck if "idle" in r]) for k in ("latency_ms", "pesq_wb")}
        for condition in CONDITIONS:
            rows = [r[condition] for r in bottleneck if condition in r and "error" not in r[condition]]
            lat, pesq = median([x.get("latency_ms") for x in rows]), median([x.get("pesq_wb") for x in rows])
            stream = median([x.get("stream_mbit") for x in rows])
            d_lat = f"{lat - idle['latency_ms']:+.1f}" if lat is not None and idle["latency_ms"] is not None else "-"
            d_pesq = f"{pesq - idle['pesq_wb']:+.2f}" if pesq is not None and idle["pesq_wb"] is not None else "-"
            share = f"{100 * stream / rate_mbit:.0f}" if stream else "-"
            print(f"{condition:<11} {voice.fmt(lat):>10} {d_lat:>6} {voice.fmt(pesq, '{:.2f}'):>8} {d_pesq:>7} "
                  f"{voice.fmt(stream, '{:.2f}'):>13} {share:>9}")
        print("Targets: peervoice +ms <= 10, dPESQ >= -0.1, stream >= 80 % of the rate; loopback peervoice >= ssh.")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", required=True, help="where the release peervoiced and peervoicectl are")
    ap.add_argument("--runs", type=int, default=3, help="fresh starts per part (default 3)")
    ap.add_argument("--parts", default="loopback,bottleneck")
    ap.add_argument("--loopback-mib", type=int, default=1024, help="MiB per loopback measurement (default 1024)")
    ap.add_argument("--rate-mbit", type=int, default=20, help="the bottleneck's rate (default 20)")
    ap.add_argument("--queue-ms", type=int, default=100, help="the bottleneck's tail-drop queue (default 100)")
    ap.add_argument("--ramp", type=float, default=3.0, help="seconds a stream runs before the speech (default 3)")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds of voice before the first measurement (default 2)")
    ap.add_argument("--peervoice-args", default="",
                    help="more options for the bottleneck's daemons, e.g. '--no-echo-cancel --no-noise-suppression' "
                         "(PESQ-WB then varies far less from run to run than with the capture processing on)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "channels.json"))
    ap.add_argument("--keep-temp", action="store_true")
    a = ap.parse_args()
    a.daemon_args = voice.shlex.split(a.peervoice_args)
    parts = a.parts.split(",")
    signal.signal(signal.SIGTERM, voice.on_signal)
    signal.signal(signal.SIGINT, voice.on_signal)
    workdir = tempfile.mkdtemp(prefix="pv-bench-channels-")
    log(f"work directory {workdir}")
    started = datetime.datetime.now().isoformat(timespec="seconds")
    load_before = os.getloadavg()
    loopback, bottleneck, status = [], [], 0
    pw, nets, ssh = None, None, None
    try:
        if "loopback" in parts:
            ssh = OpenSSH(workdir)
            for index in range(1, a.runs + 1):
                try:
                    loopback.append(loopback_run(a, workdir, index, ssh))
                except BenchError as e:
                    log(f"loopback run {index}: {e}")
                    status = 1
            ssh.stop()
        if "bottleneck" in parts:
            nets = Namespaces(a.rate_mbit, a.queue_ms)
            pw = voice.PipeWire(os.path.join(workdir, "pw"))
            for index in range(1, a.runs + 1):
                try:
                    bottleneck.append(bottleneck_run(a, pw, nets, workdir, index))
                except BenchError as e:
                    log(f"bottleneck run {index}: {e}")
                    status = 1
    except voice.Terminated as e:
        log(f"stopped: {e}")
        status = 130
    except BenchError as e:
        log(f"cannot run: {e}")
        status = 1
    finally:
        CHILDREN.stop_all()
        if pw is not None:
            pw.stop()
        if nets is not None:
            nets.delete()
        if not a.keep_temp:
            shutil.rmtree(workdir, ignore_errors=True)
    print_tables(loopback, bottleneck, a.rate_mbit)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"benchmark": "channels", "started": started,
                   "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_before": load_before,
                               "load_after": os.getloadavg()},
                   "parameters": {"runs": a.runs, "loopback_mib": a.loopback_mib, "rate_mbit": a.rate_mbit,
                                  "peervoice_args": a.daemon_args,
                                  "queue_ms": a.queue_ms, "ramp_s": a.ramp, "bin_dir": a.bin_dir},
                   "loopback": loopback, "bottleneck": bottleneck}, f, indent=1)
    log(f"wrote {a.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
