"""make bench-playout: the receive side's playout, offline and deterministic (bench/playout/README.md).

For each frame size, network condition and seed, playout-bench encodes Tests/Fixtures/speech.wav
with libopus as the daemon does, sends it on a seeded arrival trace, and plays it out through the
core's JitterBuffer and VoicePlayout by a simulated device (one quantum per cycle) and voice thread
(the ring refilled as CallAudio does); this scores what was played against the input: PESQ-WB
(P.862.2 at 16 kHz) against the fixture, latency (lag of the global cross-correlation, mouth-to-ear but for the
playback device's own quantum) and the receiver's counts. Medians over the seeds; every playout
gets the same traces. No real time, no threads: the numbers do not depend on the machine's load.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
from scipy import signal
from scipy.io import wavfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "voice"))
from analysis import by_talkspurt, talkspurt_pesq, xcorr_lag  # noqa: E402
from pesq import pesq  # noqa: E402

SPEECH = os.path.join(ROOT, "Tests", "Fixtures", "speech.wav")
CONDITIONS = {
    "clean": [],
    "j30": ["--jitter"],
    "j30-loss5": ["--jitter", "--loss", "5"],
    "j30-loss10": ["--jitter", "--loss", "10"],
}
# name -> playout-bench arguments
PLAYOUTS = {
    # main before issue 20: no merging, every output decoded as it comes
    "main": ["--refill-at-once", "--no-merge", "--direct-render", "--set", "estimatedUntilPackets=0"],
    # no merging, concealment kept whole and handed out in steps (VoicePlayout)
    "kept": ["--refill-at-once", "--no-merge", "--set", "estimatedUntilPackets=0"],
    # merging, VoicePlayout, no early estimate (the daemon before it)
    "merge": ["--refill-at-once", "--set", "estimatedUntilPackets=0"],
    # and the jitter buffer's early estimate of the jitter (its default, 500)
    "merge+estimate": ["--refill-at-once"],
    # and the refill waiting for a missing packet until 3 ms before the next draw: the daemon now
    "merge+estimate+wait": [],
    # h-jitter's integration choices, one at a time, on top of "merge"
    "merge+advance-now": ["--refill-at-once", "--advance-now", "--set", "estimatedUntilPackets=0"],
    "merge+raise-fill": ["--refill-at-once", "--raise-fill", "--set", "estimatedUntilPackets=0"],
    # oracles: one fixed playout offset, a quantile of the whole trace's relative delays, no adaptation
    "oracle-p95": ["--oracle-quantile", "0.95"],
    "oracle-p99": ["--oracle-quantile", "0.99"],
    "oracle-p99.5": ["--oracle-quantile", "0.995"],
    "oracle-max": ["--oracle-quantile", "1"],
}
RATE = 48000


def playout_arguments(playout):
    """A named playout, or a named one with jitter buffer tunables: `merge@initialDelayMs=40@...`."""
    name, *tunables = playout.split("@")
    return PLAYOUTS[name] + [a for t in tunables for a in ("--set", t)]


def run_one(binary, pcm_path, frame_ms, condition, playout, seed, work, rest_ms):
    out = os.path.join(work, f"out-{frame_ms}-{condition}-{playout}-{seed}.raw")
    line = subprocess.run([binary, "--input", pcm_path, "--output", out, "--frame-ms", str(frame_ms),
                           "--seed", str(seed), "--rest-ms", str(rest_ms), *CONDITIONS[condition], *playout_arguments(playout)],
                          check=True, capture_output=True, text=True).stdout
    counts = json.loads(line)
    played = np.fromfile(out, dtype=np.int16).astype(np.float64) / 32768.0
    os.unlink(out)
    return counts, played


def score(ref48, ref16, played, counts):
    lag, peak = xcorr_lag(ref48, played, int(0.5 * RATE))
    deg = played[lag:lag + len(ref48)]
    if len(deg) < len(ref48):
        deg = np.concatenate([deg, np.zeros(len(ref48) - len(deg))])
    pesq_wb = float(pesq(16000, ref16, signal.resample_poly(deg, 1, RATE // 16000), "wb"))
    received = max(1, counts["received"])
    padded = np.concatenate([played, np.zeros(RATE)])
    return {
        "latency_ms": lag * 1000.0 / RATE + counts["device_start_ms"],
        "pesq_wb": pesq_wb,
        "talkspurt_pesq_wb": talkspurt_pesq(ref48, padded, RATE, lag),
        "buffer_ms": counts["buffer_delay_ms"],
        "late_pct": 100.0 * counts["late"] / received,
        "merged_pct": 100.0 * counts["merged"] / received,
        "concealed_ms": counts["concealed_ms"],
        "fec": counts["fec"],
        "underruns": counts["underruns"],
        "inserted": counts.get("inserted", 0),
        "dropped": counts["dropped"],
    }


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def talkspurts_text(cell):
    return " / ".join(f"{v:.2f}" for v in cell.get("talkspurt_pesq_wb", []))


def print_table(results, reference):
    """The cells as a Markdown table; dPESQ = the median over seeds of each seed's PESQ-WB minus the
    reference playout's on the same trace (paired: the traces are the same)."""
    print(f"\n| frame | network | playout | latency ms | buffer ms | PESQ-WB | dPESQ vs {reference} | by talkspurt | late % | merged % | concealed ms | FEC | underruns |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for cell in results:
        base = next((c for c in results if c["frame_ms"] == cell["frame_ms"] and c["condition"] == cell["condition"]
                     and c["playout"] == reference), None)
        delta = median([r["pesq_wb"] - b["pesq_wb"] for r, b in zip(cell["runs"], base["runs"])]) if base else None
        print(f"| {cell['frame_ms']} | {cell['condition']} | {cell['playout']} | {cell['latency_ms']:.1f} | "
              f"{cell['buffer_ms']:.1f} | {cell['pesq_wb']:.2f} | {'' if delta is None else f'{delta:+.2f}'} | "
              f"{talkspurts_text(cell)} | "
              f"{cell['late_pct']:.2f} | {cell['merged_pct']:.2f} | {cell['concealed_ms']:.0f} | {cell['fec']:.0f} | "
              f"{cell['underruns']:.0f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", help="the playout-bench executable")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--frames", default="20,10")
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--playouts", default="main,kept,merge,merge+estimate,merge+estimate+wait,oracle-p99,oracle-max", help=f"of {', '.join(PLAYOUTS)}")
    ap.add_argument("--rest-ms", type=int, default=0,
                    help="a resting microphone (a keepalive every 400 ms) this long before the speech, as in bench-voice")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "results", "playout.json"))
    ap.add_argument("--replot", action="store_true", help="only print the table from --json")
    args = ap.parse_args()
    if args.replot:
        with open(args.json) as f:
            cells = json.load(f)["cells"]
        print_table(cells, args.playouts.split(",")[0])
        return

    rate16, ref16 = wavfile.read(SPEECH)
    ref16 = ref16.astype(np.float64) / 32768.0
    ref48 = signal.resample_poly(ref16, RATE // rate16, 1)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-playout-") as work:
        pcm_path = os.path.join(work, "speech48k.raw")
        np.clip(np.round(ref48 * 32768.0), -32768, 32767).astype(np.int16).tofile(pcm_path)
        ref48 = np.fromfile(pcm_path, dtype=np.int16).astype(np.float64) / 32768.0
        for frame_ms in [int(f) for f in args.frames.split(",")]:
            for condition in args.conditions.split(","):
                for playout in args.playouts.split(","):
                    if playout.startswith("oracle") and "loss" in condition:
                        continue  # an oracle plays a lost packet's frame as DTX: not meant for loss
                    runs = []
                    for seed in range(1, args.seeds + 1):
                        counts, played = run_one(args.bin, pcm_path, frame_ms, condition, playout, seed, work, args.rest_ms)
                        runs.append(score(ref48, ref16, played, counts))
                    cell = {"frame_ms": frame_ms, "condition": condition, "playout": playout, "runs": runs}
                    cell.update({k: median([r[k] for r in runs]) for k in runs[0] if k != "talkspurt_pesq_wb"})
                    cell["talkspurt_pesq_wb"] = by_talkspurt([r["talkspurt_pesq_wb"] for r in runs], median)
                    results.append(cell)
                    print(f"{frame_ms:>3} {condition:<11} {playout:<18} latency {cell['latency_ms']:6.1f} ms  "
                          f"buffer {cell['buffer_ms']:5.1f} ms  PESQ-WB {cell['pesq_wb']:.2f} "
                          f"({talkspurts_text(cell)})  "
                          f"late {cell['late_pct']:.2f} %  merged {cell['merged_pct']:.2f} %  "
                          f"concealed {cell['concealed_ms']:.0f} ms  FEC {cell['fec']:.0f}  inserted {cell['inserted']:.0f}  "
                          f"dropped {cell['dropped']:.0f}  under {cell['underruns']:.0f}",
                          flush=True)
    print_table(results, args.playouts.split(",")[0])
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"seeds": args.seeds, "rest_ms": args.rest_ms, "cells": results}, f, indent=1)
    print(f"medians over {args.seeds} seeds; written to {args.json}")


if __name__ == "__main__":
    main()
