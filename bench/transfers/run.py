#!/usr/bin/env python3
"""File transfers against scp and rsync on the same link (`make bench-transfers`).

Each run starts two release peervoiced afresh on private buses, paired over 127.0.0.1, and a private
sshd on 127.0.0.1 (bench/channels' OpenSSH: OpenSSH 9.2, chacha20-poly1305, its default here). It
moves one file of --mib MiB of random bytes (made once) from A to B with, in turn:
  peervoice   `peervoicectl send-file B FILE` (what a user gets: the file read and hashed, sealed,
              written to a hidden part file, hashed again, fsync'd, moved into B's download folder);
              the clock starts when B's `peervoicectl transfer accept` returns and stops when
              send-file exits 0 (complete: B verified and placed the file)
  scp         `scp FILE 127.0.0.1:DEST` (SFTP protocol, OpenSSH's default)
  rsync       `rsync FILE 127.0.0.1:DEST` over the same ssh (a new file: no delta to find)
Each destination is a fresh directory; every copy is checked to have the file's size and SHA-256.
MiB/s = the file / the wall time. The systems take turns within a run; medians over the runs.

Prints a table and writes bench/results/transfers.json; asserts nothing (exit status non-zero only
when a run could not be carried out). Needs openssh-server and rsync.
"""
import argparse
import datetime
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
spec = importlib.util.spec_from_file_location("channelbench", os.path.join(ROOT, "bench", "channels", "run.py"))
channels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(channels)
voice, BenchError, log, wait_for = channels.voice, channels.BenchError, channels.log, channels.wait_for
SYSTEMS = ("peervoice", "scp", "rsync")


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def one_run(args, workdir, index, ssh, source, expected):
    label = f"run-{index}"
    downloads = os.path.join(workdir, f"{label}-downloads")
    a, b, b_id = channels.start_pair(channels.NoPipeWire, os.path.join(args.bin_dir, "peervoiced"), workdir, label,
                                     extra=["--download-dir", downloads])
    ctl = os.path.join(args.bin_dir, "peervoicectl")
    result = {}
    try:
        for system in SYSTEMS:
            destination = os.path.join(workdir, f"{label}-{system}")
            os.makedirs(destination)
            if system == "peervoice":
                sender = channels.ctl(args.bin_dir, a, ["send-file", b_id, source])
                wait_for("the offer at B", lambda: channels.run([ctl, "transfer", "accept", "1"], env=b.env,
                                                                check=False).returncode == 0, 15, 0.05)
                elapsed = channels.timed([sender])
                landed = os.path.join(downloads, os.path.basename(source))
            elif system == "scp":
                start = time.monotonic()
                # ssh's options after its "-p PORT": scp spells the port -P.
                channels.run(["scp", "-P", str(ssh.port)] + ssh.client[3:] + [source, f"127.0.0.1:{destination}/"], timeout=600)
                elapsed = time.monotonic() - start
                landed = os.path.join(destination, os.path.basename(source))
            else:
                start = time.monotonic()
                channels.run(["rsync", "-e", " ".join(ssh.client), source, f"127.0.0.1:{destination}/"], timeout=600)
                elapsed = time.monotonic() - start
                landed = os.path.join(destination, os.path.basename(source))
            if os.path.getsize(landed) != os.path.getsize(source) or sha256(landed) != expected:
                raise BenchError(f"{system}: what landed differs from the file")
            os.remove(landed)
            mibs = round(args.mib / elapsed, 1)
            result[system] = mibs
            log(f"{label}: {system}: {mibs} MiB/s")
    finally:
        for peer in (a, b):
            peer.stop_daemon()
            peer.stop_bus()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", required=True, help="where the release peervoiced and peervoicectl are")
    ap.add_argument("--runs", type=int, default=3, help="fresh starts (default 3)")
    ap.add_argument("--mib", type=int, default=1024, help="the file's size in MiB (default 1024)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "transfers.json"))
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, voice.on_signal)
    signal.signal(signal.SIGINT, voice.on_signal)
    workdir = tempfile.mkdtemp(prefix="pv-bench-transfers-")
    log(f"work directory {workdir}")
    started = datetime.datetime.now().isoformat(timespec="seconds")
    load_before = os.getloadavg()
    runs, status, ssh = [], 0, None
    try:
        source = os.path.join(workdir, "film.bin")
        channels.run(["sh", "-c", f"head -c {a.mib << 20} /dev/urandom > '{source}'"], timeout=600)
        expected = sha256(source)
        ssh = channels.OpenSSH(workdir)
        for index in range(1, a.runs + 1):
            try:
                runs.append(one_run(a, workdir, index, ssh, source, expected))
            except BenchError as e:
                log(f"run {index}: {e}")
                status = 1
    finally:
        if ssh:
            ssh.stop()
        voice.CHILDREN.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(f"{a.mib} MiB of random bytes from A to B over 127.0.0.1: MiB/s, median of {len(runs)} runs [range]")
    header = f"{'system':<10} {'MiB/s':>22} {'x scp':>6} {'x rsync':>8}"
    print(header)
    print("-" * len(header))
    medians = {s: channels.median([r.get(s) for r in runs]) for s in SYSTEMS}
    for system in SYSTEMS:
        values = [r[system] for r in runs if system in r]
        cell = f"{medians[system]} [{min(values)}-{max(values)}]" if values else "-"
        ratio = lambda base: f"{medians[system] / medians[base]:.2f}" if medians[system] and medians[base] else "-"
        print(f"{system:<10} {cell:>22} {ratio('scp'):>6} {ratio('rsync'):>8}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"started": started, "load_before": load_before, "load_after": os.getloadavg(), "mib": a.mib,
                   "runs": runs, "medians": medians}, f, indent=1)
    print(f"wrote {a.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
