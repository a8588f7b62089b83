"""bench/fec: what in-band FEC costs and buys, at each packet-loss hint, on the speech fixture.

Encodes Tests/Fixtures/speech.wav with libopus as the daemon does (fec_codec.c), loses packets at
random, repairs each loss from the next packet's FEC when that packet arrived (as the jitter buffer
does when it holds the next packet), and scores the decoded audio against the input with PESQ-WB.
The numbers behind FECPolicy (docs/VOICE.md, "FEC follows the peer's loss reports").

  run.py --codec PATH [--frame-ms 20|10] [--bitrate 24000] [--losses 0,2,5,10] [--hints 0,1,2,3,5,10] [--seeds 4]
         [--no-repair]   (FEC data sent but never used: a lossy path without jitter)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from scipy import signal
from scipy.io import wavfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "voice"))
import analysis  # noqa: E402  (bench/voice's scoring: the same PESQ-WB as bench-voice)

RATE = 48000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--codec", required=True, help="the compiled fec_codec")
    ap.add_argument("--frame-ms", type=int, choices=(10, 20), default=20)
    ap.add_argument("--bitrate", type=int, default=24000)
    ap.add_argument("--losses", default="0,2,5,10", help="random packet loss, percent")
    ap.add_argument("--hints", default="0,1,2,3,5,10", help="encoder packet-loss hints, percent (0 = no FEC)")
    ap.add_argument("--seeds", type=int, default=4, help="loss patterns per cell (default 4)")
    ap.add_argument("--no-repair", action="store_true",
                    help="never repair a loss from the next packet (it is not there yet: no jitter)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "fec.json"))
    a = ap.parse_args()
    losses = [float(x) for x in a.losses.split(",")]
    hints = [int(x) for x in a.hints.split(",")]

    rate, speech = wavfile.read(os.path.join(ROOT, "Tests", "Fixtures", "speech.wav"))
    reference = signal.resample_poly(speech.astype(np.float64), RATE // rate, 1)
    reference = np.clip(np.round(reference), -32768, 32767).astype(np.int16)
    cells = {}
    with tempfile.TemporaryDirectory(prefix="pv-bench-fec-") as work:
        source = os.path.join(work, "in.raw")
        reference.tofile(source)
        ref = reference.astype(np.float64) / 32768.0
        for loss in losses:
            for hint in hints:
                scores, recovered, dropped = [], 0, 0
                for seed in range(1, a.seeds + 1):
                    decoded_path = os.path.join(work, "out.raw")
                    line = subprocess.run([a.codec, source, decoded_path, str(a.frame_ms * RATE // 1000), str(a.bitrate),
                                           str(hint), str(loss), str(seed), "0" if a.no_repair else "1"],
                                          check=True, capture_output=True, text=True).stdout.split()
                    dropped += int(line[1])
                    recovered += int(line[2])
                    deg = np.fromfile(decoded_path, dtype=np.int16).astype(np.float64) / 32768.0
                    lag, _ = analysis.xcorr_lag(ref, deg, RATE // 10)  # the codec delay (312 samples)
                    n = min(len(ref), len(deg) - lag)
                    scores.append(analysis.quality(ref[:n], deg[lag:lag + n], RATE)["pesq_wb"])
                cells[f"{loss:g}/{hint}"] = {"loss_percent": loss, "hint_percent": hint, "pesq_wb": scores,
                                             "mean": round(float(np.mean(scores)), 3),
                                             "packets_lost": dropped, "recovered_by_fec": recovered}
    print(f"PESQ-WB of the speech fixture through libopus at {a.bitrate // 1000} kbit/s, {a.frame_ms} ms frames, "
          f"mean of {a.seeds} loss patterns (hint 0 = no FEC)"
          + ("; losses never repaired from the next packet" if a.no_repair else ""))
    print("loss %  " + "".join(f"  hint {h:>2}" for h in hints))
    for loss in losses:
        row = [cells[f"{loss:g}/{h}"]["mean"] for h in hints]
        best = max(row)
        print(f"{loss:6g}  " + "".join(f"  {v:6.2f}{'*' if v == best else ' '}" for v in row))
    print("* best in the row")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"benchmark": "fec", "bitrate": a.bitrate, "frame_ms": a.frame_ms, "seeds": a.seeds,
                   "repair": not a.no_repair, "cells": cells}, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
