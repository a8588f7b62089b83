#!/usr/bin/env python3
"""File transfers against scp, rsync and raw TCP on the same paths (`make bench-files`, issue 30).

One file of --mib MiB of random bytes (made once, 1 GiB by default) goes from A to B; every copy is
checked to have the file's size and SHA-256 and removed. MiB/s = the file / the wall time. The
systems take turns within each run; each run starts every daemon afresh; medians over --runs.

  peervoice   `peervoicectl send-file B FILE` between two release peervoiced on private buses, paired
              over the path (what a user gets: the file read and hashed, sealed, written to a hidden
              part file, hashed again, fsync'd, moved into B's download folder); the clock starts when
              B's `peervoicectl transfer accept` returns and stops when send-file exits 0 (complete:
              B verified and placed the file)
  scp         `scp FILE 127.0.0.1:DEST` to a private sshd (OpenSSH 9.2, SFTP protocol, chacha20-poly1305)
  rsync       `rsync FILE 127.0.0.1:DEST` over the same ssh (a new file: no delta to find)
  baseline    with --baseline-bin-dir: the same as peervoice, from another build (its own pair of
              daemons), for a change's before and after in the same run
  tcp         raw TCP, no encryption, no hash: `socat -u OPEN:FILE TCP:B:P` into
              `socat -u TCP-LISTEN:P OPEN:DEST,creat` (timed until both have exited: the file written)

CPU s/GiB: the CPU time (user + system, all cores) each copy cost, per GiB: both daemons and
peervoicectl; scp or rsync with ssh, and sshd's session with sftp-server or rsync (reaped children of
the private sshd); both socats. On a shared machine the wall time depends on what else runs; this
does much less.

Parts (--parts, all by default):
  loopback    over 127.0.0.1: peervoice, scp, rsync, tcp
  1gbit       two network namespaces joined by a veth pair, each end shaped by tbf to 1 Gbit/s:
              peervoice and tcp
  lossy       the same two namespaces joined instead through tunrelay.py (TUN devices, this kernel has
              no netem): --delay-ms one way in each direction (20: 40 ms round trip), --loss-percent of
              the packets dropped in each direction (1), each TUN shaped by tbf to 50 Mbit/s (a 50 ms
              queue); --lossy-mib MiB (32 by default: PeerVoice moves ~4 MiB/s there, see the README);
              peervoice and tcp
  resume      on the 1 Gbit/s namespaces: a peervoice transfer whose link is cut (A's veth down) once
              B has 40 % of the file, for --cut-s seconds (longer than the link's keepalive), then
              restored; the transfer resumes by itself. Re-sent = A's Transferred when its stream ended
              (what its thread had handed to the daemon, some of which never left A) minus where the
              receiver resumed (A's log: "resuming from ... (N of M bytes)"); both as % of the file
  call        bench/channels' bottleneck (A - R - B, tbf 20 Mbit/s with a 100 ms queue in R, TCP Reno
              at both ends): the call's mouth-to-ear latency and PESQ-WB alone and while a 1 GiB
              transfer runs (its rate: B's Transferred over the speech); the daemons' defaults
The namespaces use this machine's default congestion control (BBR here) for both peervoice's link and
raw TCP, except in `call` (Reno, as bench/channels explains).

Targets (issue 30): loopback >= 1.2x scp; on both namespace paths >= 0.95x raw TCP; a resume re-sends
< 1 % of the file; the call's median latency +<= 10 ms while a transfer runs.

Prints a table and writes bench/results/files.json; asserts nothing (exit status non-zero only when a
run could not be carried out). Needs root (namespaces), openssh-server, rsync, socat, and for `call`
PipeWire and the bench venv (numpy, scipy, pesq).
"""
import argparse
import datetime
import hashlib
import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
spec = importlib.util.spec_from_file_location("channelbench", os.path.join(ROOT, "bench", "channels", "run.py"))
channels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(channels)
voice, BenchError, log, wait_for, run = channels.voice, channels.BenchError, channels.log, channels.wait_for, channels.run
PARTS = ("loopback", "1gbit", "lossy", "resume", "call")
SYSTEMS = {"loopback": ("peervoice", "scp", "rsync", "tcp"), "1gbit": ("peervoice", "tcp"), "lossy": ("peervoice", "tcp")}
TRANSFER = "/org/example/PeerVoice/transfers/1"


def systems(args, part, index=1):
    """What a part compares in run `index`; PeerVoice and the baseline build, when there is one,
    take turns going first (whichever went first was the slower in every run of a test here)."""
    builds = ("peervoice", "baseline") if args.baseline_bin_dir else ("peervoice",)
    chosen = (builds if index % 2 else builds[::-1]) + SYSTEMS[part][1:]
    return tuple(s for s in chosen if not args.systems or s in args.systems or (s == "baseline" and "peervoice" in args.systems))


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class Path:
    """Where A and B are: 127.0.0.1, or two namespaces joined by a shaped veth pair or tunrelay.py."""

    def __init__(self, kind, args, workdir):
        self.kind, self.namespaces, self.relay = kind, [], None
        if kind == "loopback":
            self.addr_a = self.addr_b = "127.0.0.1"
            return
        tag = f"pvfb{os.getpid() % 100000}"
        self.ns_a, self.ns_b = f"{tag}a", f"{tag}b"
        self.dev_a, self.dev_b = f"{tag}xa", f"{tag}xb"
        self.addr_a, self.addr_b = "10.91.0.1", "10.91.0.2"
        try:
            for ns in (self.ns_a, self.ns_b):
                run(["ip", "netns", "add", ns])
                self.namespaces.append(ns)
                run(["ip", "-n", ns, "link", "set", "lo", "up"])
            if kind == "lossy":
                out = open(os.path.join(workdir, "tunrelay.out"), "w+")
                self.relay = voice.CHILDREN.start([sys.executable, os.path.join(HERE, "tunrelay.py"), "--a", self.dev_a,
                                                   "--b", self.dev_b, "--delay-ms", str(args.delay_ms),
                                                   "--loss-percent", str(args.loss_percent)], stdout=out, name="tunrelay")
                self.relay_out = out.name
                wait_for("tunrelay", lambda: "ready" in open(self.relay_out).read(), 10)
                rate, shaping = "50mbit", ["burst", "32kb", "latency", "50ms"]
            else:
                run(["ip", "link", "add", self.dev_a, "type", "veth", "peer", "name", self.dev_b])
                rate, shaping = "1gbit", ["burst", "512kb", "latency", "10ms"]
            for ns, dev, mine, theirs in ((self.ns_a, self.dev_a, self.addr_a, self.addr_b),
                                          (self.ns_b, self.dev_b, self.addr_b, self.addr_a)):
                run(["ip", "link", "set", dev, "netns", ns])
                run(["ip", "-n", ns, "addr", "add", mine, "peer", theirs, "dev", dev])
                run(["ip", "-n", ns, "link", "set", dev, "up"])
                run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate] + shaping)
        except BenchError:
            self.delete()
            raise

    def launcher(self, side):
        return [] if self.kind == "loopback" else ["ip", "netns", "exec", self.ns_a if side == "a" else self.ns_b]

    def set_link(self, up):
        run(["ip", "-n", self.ns_a, "link", "set", self.dev_a, "up" if up else "down"])

    def delete(self):
        if self.relay is not None:
            voice.CHILDREN.stop(self.relay)
            log(f"tunrelay: {open(self.relay_out).read().split('ready', 1)[-1].strip()}")
            self.relay = None
        for ns in self.namespaces:
            run(["ip", "netns", "del", ns], check=False)
        self.namespaces = []


def start_pair(args, path, workdir, label, downloads, bin_dir=None):
    return channels.start_pair(channels.NoPipeWire, os.path.join(bin_dir or args.bin_dir, "peervoiced"), workdir, label,
                               listen=(f"{path.addr_a}:0", f"{path.addr_b}:0"), launchers=(path.launcher("a"), path.launcher("b")),
                               extra=["--download-dir", downloads])


def accept_first(args, b):
    ctl = os.path.join(args.bin_dir, "peervoicectl")
    wait_for("the offer at B", lambda: run([ctl, "transfer", "accept", "1"], env=b.env, check=False).returncode == 0, 15, 0.05)


def transferred(daemon):
    r = run(["busctl", "--user", "get-property", "org.example.PeerVoice", TRANSFER, "org.example.PeerVoice.Transfer",
             "Transferred"], env=daemon.env, check=False)
    return int(r.stdout.split()[1]) if r.returncode == 0 else None


def process_cpu(pid, children=False):
    """CPU seconds of a process (with `children`: of its children it has reaped)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = sum(int(fields[i]) for i in ((13, 14) if children else (11, 12)))
    return ticks / os.sysconf("SC_CLK_TCK")


class ThreadCPU:
    """Where each thread of the daemons spent a copy, summed by side and thread name
    (`peervoice-send`: read and hash; `main`: seal or open, and the sockets; `peervoice-recv`:
    write and hash; `peervoice-sync`: fdatasync), from /proc's schedstat: seconds running, and
    seconds runnable but waiting for a core (others' work on a shared machine); the rest of the
    wall time it slept (waiting for the pipeline). A stream's threads end with it, so /proc is
    sampled every 0.1 s while the copy runs and each thread's last figures kept."""

    def __init__(self, pids):
        self.pids, self.seen, self.start = pids, {}, {}
        self.done = threading.Event()
        self.sample(self.start)
        self.began = time.monotonic()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def sample(self, into):
        for side, pid in self.pids:
            try:
                tasks = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tasks:
                try:
                    name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
                    running, waiting = (int(x) / 1e9 for x in open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[:2])
                    into[(side, pid, tid)] = ("main" if tid == str(pid) else name, running, waiting)
                except (OSError, ValueError):
                    continue

    def run(self):
        while not self.done.wait(0.1):
            self.sample(self.seen)

    def stop(self):
        """{"side thread": [s running, s waiting for a core]} per second of the copy's wall time,
        for the threads that ran more than 1 % of it."""
        self.done.set()
        self.thread.join()
        self.sample(self.seen)
        wall = time.monotonic() - self.began
        totals = {}
        for key, (name, running, waiting) in self.seen.items():
            label = f"{key[0]} {name}"
            _, running0, waiting0 = self.start.get(key, (name, 0.0, 0.0))
            before = totals.get(label, (0.0, 0.0))
            totals[label] = (before[0] + running - running0, before[1] + waiting - waiting0)
        return {label: [round(r / wall, 3), round(w / wall, 3)] for label, (r, w) in sorted(totals.items()) if r / wall > 0.01}


def cpu_now(pair, ssh):
    """CPU seconds so far of everything a copy can run in: this script's reaped children (scp, ssh,
    rsync, socat, peervoicectl), sshd's reaped sessions (sshd, sftp-server, rsync), both daemons."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    if ssh is not None:
        # sshd reaps a session a moment after the client exits: its time counts once it has.
        pid = ssh.process.pid
        wait_for("sshd to reap its sessions", lambda: not open(f"/proc/{pid}/task/{pid}/children").read().strip(), 10, 0.02)
        total += process_cpu(pid, children=True)
    return total + sum(process_cpu(daemon.pid) for daemon in pair[:2])


def copy(args, system, path, workdir, label, ssh, source, pair):
    """One copy of `source` from A to B by `system`; returns (seconds, where it landed)."""
    destination = os.path.join(workdir, f"{label}-{system}")
    os.makedirs(destination)
    landed = os.path.join(destination, os.path.basename(source))
    if system in ("peervoice", "baseline"):
        a, b, b_id, downloads = pair
        bin_dir = args.bin_dir if system == "peervoice" else args.baseline_bin_dir
        sender = channels.ctl(bin_dir, a, ["send-file", b_id, source])
        accept_first(args, b)
        return channels.timed([sender]), os.path.join(downloads, os.path.basename(source))
    start = time.monotonic()
    if system == "scp":
        # ssh's options after its "-p PORT": scp spells the port -P.
        run(["scp", "-P", str(ssh.port)] + ssh.client[3:] + [source, f"127.0.0.1:{destination}/"], timeout=900)
    elif system == "rsync":
        run(["rsync", "-e", " ".join(ssh.client), source, f"127.0.0.1:{destination}/"], timeout=900)
    else:
        port = voice.free_port(voice.socket.SOCK_STREAM)
        receiver = subprocess.Popen(path.launcher("b") + ["socat", "-u", f"TCP-LISTEN:{port},bind={path.addr_b},reuseaddr",
                                                          f"OPEN:{landed},creat"], stderr=subprocess.PIPE)
        time.sleep(0.3)
        start = time.monotonic()
        sender = subprocess.Popen(path.launcher("a") + ["socat", "-u", f"OPEN:{source}", f"TCP:{path.addr_b}:{port}"],
                                  stderr=subprocess.PIPE)
        channels.timed([sender, receiver], timeout=900)
    return time.monotonic() - start, landed


def throughput_run(args, part, path, workdir, index, ssh, sources):
    label = f"{part}-{index}"
    source, expected, mib = sources[part]
    downloads = os.path.join(workdir, f"{label}-downloads")
    pairs = {"peervoice": start_pair(args, path, workdir, label, downloads) + (downloads,)}
    result = {}
    try:
        if args.baseline_bin_dir:
            base_downloads = downloads + "-baseline"
            pairs["baseline"] = start_pair(args, path, workdir, label + "-baseline", base_downloads, args.baseline_bin_dir) + (base_downloads,)
        time.sleep(args.settle_pairs)
        for system in systems(args, part, index):
            pair = pairs.get(system, pairs["peervoice"])
            threads = ThreadCPU((("A", pair[0].pid), ("B", pair[1].pid))) if system in ("peervoice", "baseline") else None
            cpu_before = cpu_now(pair, ssh)
            elapsed, landed = copy(args, system, path, workdir, label, ssh, source, pair)
            # Each daemon's ~1 % of a core for keepalives and the bus counts against PeerVoice only.
            result[f"{system}-cpu"] = round((cpu_now(pair, ssh) - cpu_before) * 1024 / mib, 2)
            if threads is not None:
                result[f"{system}-threads"] = threads.stop()
            if os.path.getsize(landed) != os.path.getsize(source) or sha256(landed) != expected:
                raise BenchError(f"{system}: what landed differs from the file")
            os.remove(landed)
            result[system] = round(mib / elapsed, 1)
            log(f"{label}: {system}: {result[system]} MiB/s, {result[system + '-cpu']} CPU s/GiB"
                + (f", by thread {result[system + '-threads']}" if system + "-threads" in result else ""))
    finally:
        for a, b, _, _ in pairs.values():
            for peer in (a, b):
                peer.stop_daemon()
                peer.stop_bus()
    return result


def resume_run(args, path, workdir, index, sources):
    label = f"resume-{index}"
    source, expected, mib = sources["1gbit"]
    size = os.path.getsize(source)
    downloads = os.path.join(workdir, f"{label}-downloads")
    a, b, b_id = start_pair(args, path, workdir, label, downloads)
    try:
        sender = channels.ctl(args.bin_dir, a, ["send-file", b_id, source])
        accept_first(args, b)
        wait_for("40 % at B", lambda: (transferred(b) or 0) >= 0.4 * size, 120, 0.02)
        cut_at = transferred(b)
        path.set_link(False)
        ended = lambda: "stream ended" in open(a.log_path, errors="replace").read()
        wait_for("A's stream to end", ended, args.cut_s + 30, 0.1)
        sent_before = transferred(a)
        time.sleep(args.cut_s)
        path.set_link(True)
        pattern = r"resuming from .*\((\d+) of \d+ bytes\)"
        resumed = wait_for("the transfer to resume", lambda: re.search(pattern, open(a.log_path, errors="replace").read()), 60, 0.1)
        resumed_at = int(resumed.group(1))
        channels.timed([sender], timeout=900)
        landed = os.path.join(downloads, os.path.basename(source))
        if os.path.getsize(landed) != size or sha256(landed) != expected:
            raise BenchError("resume: what landed differs from the file")
        os.remove(landed)
    finally:
        path.set_link(True)
        for peer in (a, b):
            peer.stop_daemon()
            peer.stop_bus()
    result = {"cut_at_b": cut_at, "sent_by_a": sent_before, "resumed_at": resumed_at,
              "resent_bytes": max(0, sent_before - resumed_at), "resent_percent": round(100 * max(0, sent_before - resumed_at) / size, 3)}
    log(f"{label}: {result}")
    return result


def summarize(results, args):
    lines = []
    for part in ("loopback", "1gbit", "lossy"):
        runs = results.get(part) or []
        if not runs:
            continue
        base = "scp" if part == "loopback" else "tcp"
        mib = args.lossy_mib if part == "lossy" else args.mib
        lines.append("")
        lines.append(f"{part}: {mib} MiB from A to B, MiB/s, median of {len(runs)} runs [range]")
        header = f"{'system':<10} {'MiB/s':>22} {'x ' + base:>7}" + (f" {'x tcp':>6}" if part == "loopback" else "") + f" {'CPU s/GiB':>10}"
        lines += [header, "-" * len(header)]
        medians = {s: channels.median([r.get(s) for r in runs]) for s in systems(args, part)}
        for system in systems(args, part):
            values = [r[system] for r in runs if system in r]
            cell = f"{medians[system]} [{min(values)}-{max(values)}]" if values else "-"
            ratio = lambda other: f"{medians[system] / medians[other]:.2f}" if medians[system] and medians.get(other) else "-"
            cpu = channels.median([r.get(f"{system}-cpu") for r in runs])
            lines.append(f"{system:<10} {cell:>22} {ratio(base):>7}" + (f" {ratio('tcp'):>6}" if part == "loopback" else "")
                         + f" {voice.fmt(cpu, '{:.2f}'):>10}")
            by_thread = [r[f"{system}-threads"] for r in runs if f"{system}-threads" in r]
            if by_thread:
                labels = sorted({label for threads in by_thread for label in threads})
                lines.append("  share of the wall time each thread ran / waited for a core: " + ", ".join(
                    f"{label} {channels.median([t.get(label, [0, 0])[0] for t in by_thread]):.2f}"
                    f"/{channels.median([t.get(label, [0, 0])[1] for t in by_thread]):.2f}" for label in labels))
    if results.get("resume"):
        runs = results["resume"]
        lines.append("")
        lines.append(f"resume after a {args.cut_s} s cut at ~40 % (1 Gbit/s namespaces), {len(runs)} runs: re-sent % of the file, "
                     f"median {channels.median([r['resent_percent'] for r in runs])} "
                     f"[{', '.join(str(r['resent_percent']) for r in runs)}]")
    if results.get("call"):
        runs = results["call"]
        lines.append("")
        lines.append(f"call through a 20 Mbit/s bottleneck, medians of {len(runs)} runs")
        idle = channels.median([r["idle"].get("latency_ms") for r in runs if "idle" in r])
        for condition in ("idle", "transfer"):
            rows = [r[condition] for r in runs if condition in r and "error" not in r[condition]]
            lat = channels.median([x.get("latency_ms") for x in rows])
            pesq = channels.median([x.get("pesq_wb") for x in rows])
            stream = channels.median([x.get("stream_mbit") for x in rows])
            rise = f" ({lat - idle:+.1f} ms)" if condition != "idle" and lat is not None and idle is not None else ""
            lines.append(f"  {condition:<9} latency {voice.fmt(lat)} ms{rise}, PESQ-WB {voice.fmt(pesq, '{:.2f}')}"
                         + (f", transfer {voice.fmt(stream, '{:.2f}')} Mbit/s" if stream else ""))
    lines.append("")
    lines.append("Targets: loopback >= 1.2x scp; namespaces >= 0.95x tcp; resume re-sends < 1 %; call +<= 10 ms.")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", required=True, help="where the release peervoiced and peervoicectl are")
    ap.add_argument("--runs", type=int, default=3, help="fresh starts per part (default 3)")
    ap.add_argument("--baseline-bin-dir", help="another build's peervoiced and peervoicectl, measured beside this one")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--settle-pairs", type=float, default=8.0,
                    help="seconds between the daemons pairing and a run's first copy (default 8: without it the first copy "
                         "of a run was the slower in 16 of 17 pairs, whichever build it was; with 8 s, in 2 of 4)")
    ap.add_argument("--systems", default="", help="only these of loopback's and the namespaces' systems, e.g. peervoice,scp "
                    "(peervoice includes the baseline build; default all)")
    ap.add_argument("--mib", type=int, default=1024, help="the file's size in MiB on loopback and 1 Gbit/s (default 1024)")
    ap.add_argument("--lossy-mib", type=int, default=32, help="the file size on the 50 Mbit/s lossy path (default 32)")
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--loss-percent", type=float, default=1.0)
    ap.add_argument("--cut-s", type=float, default=6.0, help="how long the resume part's link stays down (default 6)")
    ap.add_argument("--ramp", type=float, default=3.0, help="call: seconds the transfer runs before the speech")
    ap.add_argument("--settle", type=float, default=2.0, help="call: seconds of voice before the first measurement")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "files.json"))
    a = ap.parse_args()
    a.daemon_args = []
    parts = a.parts.split(",")
    a.systems = sorted(filter(None, a.systems.split(",")))
    signal.signal(signal.SIGTERM, voice.on_signal)
    signal.signal(signal.SIGINT, voice.on_signal)
    workdir = tempfile.mkdtemp(prefix="pv-bench-files-")
    log(f"work directory {workdir}")
    started = datetime.datetime.now().isoformat(timespec="seconds")
    load_before = os.getloadavg()
    results, status, ssh = {part: [] for part in parts}, 0, None
    try:
        sources = {}
        for part, mib in (("1gbit", a.mib), ("lossy", a.lossy_mib)):
            source = os.path.join(workdir, f"film-{mib}.bin")
            if not os.path.exists(source):
                run(["sh", "-c", f"head -c {mib << 20} /dev/urandom > '{source}'"], timeout=600)
            sources[part] = (source, sha256(source), mib)
        sources["loopback"] = sources["1gbit"]
        if "loopback" in parts and (not a.systems or {"scp", "rsync"} & set(a.systems)):
            ssh = channels.OpenSSH(workdir)
        for part in parts:
            path, pw = None, None
            try:
                if part == "call":
                    path = channels.Namespaces(20, 100)
                    pw = voice.PipeWire(os.path.join(workdir, "pw"))
                else:
                    path = Path("1gbit" if part == "resume" else part, a, workdir)
                for index in range(1, a.runs + 1):
                    try:
                        if part == "call":
                            results[part].append(channels.bottleneck_run(a, pw, path, workdir, index, ("idle", "transfer")))
                        elif part == "resume":
                            results[part].append(resume_run(a, path, workdir, index, sources))
                        else:
                            results[part].append(throughput_run(a, part, path, workdir, index, ssh, sources))
                    except BenchError as e:
                        log(f"{part} run {index}: {e}")
                        status = 1
            finally:
                if pw is not None:
                    pw.stop()
                if path is not None:
                    path.delete()
    except voice.Terminated as e:
        log(f"stopped: {e}")
        status = 130
    except BenchError as e:
        log(f"cannot run: {e}")
        status = 1
    finally:
        if ssh:
            ssh.stop()
        voice.CHILDREN.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    print(summarize(results, a))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"benchmark": "files", "started": started, "load_before": load_before, "load_after": os.getloadavg(),
                   "parameters": {k: v for k, v in vars(a).items()}, "results": results}, f, indent=1)
    log(f"wrote {a.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
