#!/usr/bin/env python3
"""PeerVoice's echo cancellation against PipeWire's libpipewire-module-echo-cancel (`make bench-echo`).

Each system runs in its own private headless PipeWire (scripts/pipewire-session.sh; the module
forces its graph to 10 ms cycles, so graphs are not shared), with bench/voice's four virtual
devices: A talks into `peervoice-test-mic` and hears `bench-speaker-a`; B's microphone is
`bench-mic-b` and its speaker `peervoice-test-speaker`, whose monitor goes back into B's
microphone through a room (`pw-loopback -d 0.05`, its volume at -18 dB: 67 ms, -18 dB measured).
Two release peervoiced talk over 127.0.0.1 (`--no-cue --frame-ms 20`).

  none       B with --no-echo-cancel --no-noise-suppression: the echo as it comes back
  peervoice  B as shipped: PeerVoice's echo cancellation, noise suppression, high-pass
  module     libpipewire-module-echo-cancel (webrtc, its defaults: extended filter, delay agnostic,
             noise suppression, high-pass) in a client process of B's PipeWire, between B's devices;
             B records echo-cancel-source and plays into echo-cancel-sink, with
             --no-noise-suppression (its own canceller turns itself off on the module's source)

One 3-channel pw-record taps, in the same graph cycles: A's mic capture, A's speaker monitor,
and B's clean speech (the player's output before the room mixes anything in). Per run:
A says Tests/Fixtures/speech.wav (alone: the echo), then again while B says the same speech
rotated by half (double talk), then B alone. Measured:

  ERLE        the echo A hears, relative to A's mic, against `none` in the same windows
              (from A's first word: 1-3 s and 3-7 s, and per 0.5 s for the plot); a
              fully suppressed window (DTX silence) counts as -100 dBFS
  PESQ-WB     B's speech at A during double talk against B's clean speech (P.862.2)
  latency     B's mouth to A's ear with B alone; added = system - none
  CPU         % of one core over the run: B's peervoiced and the module's process (/proc/PID/stat),
              and the processing itself as PeerVoice's log gives it (thread CPU time)

Medians of --runs (5). Prints a table, writes bench/results/echo.json and echo.png. Asserts
nothing: exits non-zero only when a run could not be carried out.

--offline runs the shim itself over simulated rooms instead (offline.py: deterministic, about a
minute, no PipeWire): the settings sweep, the processing's own delay per part, and clean speech
alone through the shim and through the library as GStreamer's webrtcdsp drives it (webrtcdsp.cpp);
it writes bench/results/echo-offline.json.
"""
import argparse
import datetime
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "voice"))
import analysis  # noqa: E402
import offline  # noqa: E402
import run as voice  # noqa: E402
import numpy as np  # noqa: E402
from scipy.io import wavfile  # noqa: E402

RATE = voice.RATE
ROOM_DELAY_S, ROOM_GAIN_DB = 0.05, -18.0
SILENCE_DBFS = -100.0
# Tries per run: on a loaded machine a call now and then carries nothing from B to A (its
# packets all arrive late at A; seen at load 15-23 on 2 cores), which measures nothing.
ATTEMPTS = 5
SYSTEMS = ("none", "peervoice", "module")
MODULE_CONF = """
context.spa-libs = { audio.convert.* = audioconvert/libspa-audioconvert  support.* = support/libspa-support }
context.modules = [
    { name = libpipewire-module-protocol-native }
    { name = libpipewire-module-client-node }
    { name = libpipewire-module-adapter }
    { name = libpipewire-module-echo-cancel
      args = {
          library.name = aec/libspa-aec-webrtc
          audio.rate = 48000 audio.channels = 1 audio.position = [ MONO ]
          capture.props  = { node.name = echo-cancel-capture target.object = "%s" }
          source.props   = { node.name = echo-cancel-source }
          sink.props     = { node.name = echo-cancel-sink }
          playback.props = { node.name = echo-cancel-playback target.object = "%s" }
      }
    }
]
""" % (voice.MIC_B, voice.SPEAKER)


def level_dbfs(x):
    energy = float(np.mean(x ** 2)) if len(x) else 0.0
    return max(10 * np.log10(energy), SILENCE_DBFS) if energy > 0 else SILENCE_DBFS


class Tap:
    """ONE 3-channel pw-record: A's mic, A's speaker, B's clean speech (linked per utterance)."""

    def __init__(self, pw, path):
        self.pw, self.path = pw, path
        name = "bench-echo-tap"
        self.node = name
        self.process = voice.CHILDREN.start(
            ["pw-record", "--target", "0", "--latency", str(voice.QUANTUM), "--rate", str(RATE), "--channels", "3",
             "--channel-map", "FL,FR,FC", "--format", "s16", "-P", "{ node.name = \"%s\" }" % name, path],
            env=pw.env, name=name)
        pw.wait_ports([f"{name}:input_FL", f"{name}:input_FR", f"{name}:input_FC"])
        pw.run("pw-link", f"{voice.MIC}:capture_MONO", f"{name}:input_FL")
        pw.run("pw-link", f"{voice.SPEAKER_A}:monitor_MONO", f"{name}:input_FR")

    def stop(self):
        voice.CHILDREN.stop(self.process, signal.SIGINT)
        rate, data = wavfile.read(self.path)
        return data.astype(np.float64) / 32768.0


def play(pw, wav, into, tap=None):
    """Starts playing `wav` into node `into`'s input (and into the tap's third channel)."""
    pw.serial += 1
    name = f"bench-echo-play-{pw.serial}"
    p = voice.CHILDREN.start(["pw-play", "--target", "0", "--latency", str(voice.QUANTUM),
                              "-P", "{ node.name = \"%s\" }" % name, wav], env=pw.env, name=name)
    pw.wait_ports([f"{name}:output_MONO"])
    pw.run("pw-link", f"{name}:output_MONO", f"{into}:input_MONO")
    if tap:
        pw.run("pw-link", f"{name}:output_MONO", f"{tap.node}:input_FC")
    return p


def build_room(pw):
    name = "bench-room"
    voice.CHILDREN.start(["pw-loopback", "-n", name, "-c", "1", "-m", "[ MONO ]", "-d", str(ROOM_DELAY_S),
                          "--capture-props", f"{{ node.name = {name}-in node.autoconnect = false }}",
                          "--playback-props", f"{{ node.name = {name}-out node.autoconnect = false }}"],
                         env=pw.env, name=name)
    pw.wait_ports([f"{name}-in:input_MONO", f"{name}-out:output_MONO"])
    pw.run("pw-link", f"{voice.SPEAKER}:monitor_MONO", f"{name}-in:input_MONO")
    pw.run("pw-link", f"{name}-out:output_MONO", f"{voice.MIC_B}:input_MONO")
    node = next(o["id"] for o in json.loads(pw.run("pw-dump")) if o["type"] == "PipeWire:Interface:Node"
                and o["info"]["props"].get("node.name") == f"{name}-out")
    pw.run("pw-cli", "set-param", str(node), "Props", "{ channelVolumes: [ %f ] }" % 10 ** (ROOM_GAIN_DB / 20))


def one_run(kind, binary, workdir, label, rotated, speech_s):
    pw = voice.PipeWire(os.path.join(workdir, f"{label}-pw"))
    module = None
    try:
        extra = {"a": [], "b": []}
        devices = None
        if kind == "none":
            extra["b"] = ["--no-echo-cancel", "--no-noise-suppression"]
        elif kind == "module":
            pw.run("pw-metadata", "-n", "settings", "0", "clock.force-quantum", "0")  # the module's 480
            conf = os.path.join(workdir, f"{label}-echo-cancel.conf")
            with open(conf, "w") as f:
                f.write(MODULE_CONF)
            module = voice.CHILDREN.start(["pipewire", "-c", conf], env=pw.env, name="echo-cancel",
                                          log_path=os.path.join(workdir, f"{label}-echo-cancel.log"))
            pw.wait_ports(["echo-cancel-source:capture_MONO", "echo-cancel-sink:playback_MONO"], timeout=20)
            devices = {"a": (voice.MIC, voice.SPEAKER_A), "b": ("echo-cancel-source", "echo-cancel-sink")}
            extra["b"] = ["--no-noise-suppression"]
        build_room(pw)
        system = voice.PeerVoice(pw, binary, 20, None, workdir, label, devices=devices, extra_args=extra)
        try:
            time.sleep(1.0)
            tap = Tap(pw, os.path.join(workdir, f"{label}-tap.wav"))
            time.sleep(0.3)
            pids = {"peervoiced_b": system.daemons["b"].pid}
            if module:
                pids["module"] = module.pid
            before = {k: voice.cpu_ticks(p) for k, p in pids.items()}
            t0 = time.monotonic()
            a = play(pw, voice.SPEECH, voice.MIC)
            a.wait(30)
            a = play(pw, voice.SPEECH, voice.MIC)
            b = play(pw, rotated, voice.MIC_B, tap)
            a.wait(30)
            b.wait(30)
            b = play(pw, rotated, voice.MIC_B, tap)
            b.wait(30)
            time.sleep(0.6)
            wall = time.monotonic() - t0
            after = {k: voice.cpu_ticks(p) for k, p in pids.items()}
            data = tap.stop()
        finally:
            stats = system.stop()
        cpu = {k: round(100.0 * (after[k] - before[k]) / voice.CLK_TCK / wall, 2) for k in pids}
        m = re.search(r"([\d.]+) % of a core", stats.get("b", ""))
        if m and kind == "peervoice":
            cpu["processing"] = float(m.group(1))
        return analyze(data, speech_s, cpu)
    finally:
        if module:
            voice.CHILDREN.stop(module)
        for p in list(voice.CHILDREN.procs):
            if p.bench_name in ("bench-room",) or p.bench_name.startswith("bench-echo-"):
                voice.CHILDREN.stop(p, signal.SIGINT)
        pw.stop()


def analyze(data, speech_s, cpu):
    mic_a, speaker_a, said_b = data[:, 0], data[:, 1], data[:, 2]
    span_a = analysis.speech_span(mic_a, RATE)
    if span_a is None:
        raise voice.BenchError("no speech in A's microphone")
    start = span_a[0]
    # Echo round trip: A's mic -> B's speaker -> room -> B's mic -> A's speaker.
    ref = mic_a[start:start + int(6 * RATE)]
    lag, _ = analysis.xcorr_lag(ref, speaker_a[start:start + int(6.6 * RATE)], int(0.6 * RATE))
    lag = lag if lag > 0 else int(0.2 * RATE)

    def echo_return(t1, t2):
        a, b = start + int(t1 * RATE), start + int(t2 * RATE)
        return level_dbfs(speaker_a[a + lag:b + lag]) - level_dbfs(mic_a[a:b])

    result = {"cpu_pct": cpu, "echo_lag_ms": round(1000 * lag / RATE, 1),
              "return_db": {"1-3s": round(echo_return(1, 3), 2), "3-7s": round(echo_return(3, 7), 2)},
              "return_series_db": [round(echo_return(t, t + 0.5), 2) for t in np.arange(0, 7, 0.5)]}

    # B's utterances: where the third channel has speech; the first is double talk, the second alone.
    said_span = analysis.speech_span(said_b, RATE)
    if said_span is None:
        raise voice.BenchError("no speech in B's channel")
    double_from = said_span[0]
    double_to = double_from + int((speech_s - 0.3) * RATE)
    dt_ref = said_b[double_from:double_to]
    dt_lag, _ = analysis.xcorr_lag(dt_ref, speaker_a[double_from:double_to + int(0.5 * RATE)], int(0.5 * RATE))
    dt_deg = speaker_a[double_from + dt_lag:double_to + dt_lag]
    result["double_talk"] = analysis.quality(dt_ref[:len(dt_deg)], dt_deg, RATE)
    result["double_talk"]["lag_ms"] = round(1000 * dt_lag / RATE, 1)
    alone = said_b[double_to + int(0.5 * RATE):]
    alone_span = analysis.speech_span(alone, RATE)
    if alone_span:
        a0 = double_to + int(0.5 * RATE) + alone_span[0]
        a1 = double_to + int(0.5 * RATE) + alone_span[1]
        b_lag, peak = analysis.xcorr_lag(said_b[a0:a1], speaker_a[a0:a1 + int(0.5 * RATE)], int(0.5 * RATE))
        result["near_alone"] = {"latency_ms": round(1000 * b_lag / RATE, 2), "xcorr": round(peak, 3),
                                "heard_dbfs": round(level_dbfs(speaker_a[a0:a1]), 1)}
        result["near_alone"].update(analysis.quality(said_b[a0:a1], speaker_a[a0 + b_lag:a1 + b_lag], RATE))
    return result


def load_average():
    """The machine's 1-minute load average: it is shared, and load decides how far live runs are worth
    reading."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 2) if values else None


def summarize(runs):
    def get(path):
        out = []
        for r in runs:
            v = r
            for key in path:
                v = v.get(key) if isinstance(v, dict) else None
            out.append(v)
        return out
    series = [r["return_series_db"] for r in runs]
    return {
        "return_db": {w: median(get(["return_db", w])) for w in ("1-3s", "3-7s")},
        "return_series_db": [median([s[i] for s in series]) for i in range(len(series[0]))],
        "double_talk_pesq_wb": median(get(["double_talk", "pesq_wb"])),
        "near_alone_pesq_wb": median(get(["near_alone", "pesq_wb"])),
        "latency_ms": median(get(["near_alone", "latency_ms"])),
        "cpu_pct": {k: median(get(["cpu_pct", k])) for k in ("peervoiced_b", "module", "processing")},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", help="the peervoiced to run (release build; not needed with --offline)")
    parser.add_argument("--offline", action="store_true", help="the settings sweep and delays on simulated rooms")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--keep-temp", action="store_true")
    a = parser.parse_args()
    signal.signal(signal.SIGTERM, voice.on_signal)
    if a.offline:
        return run_offline()
    if not a.bin:
        parser.error("--bin is required (or --offline)")
    systems = [s for s in a.systems.split(",") if s]
    workdir = tempfile.mkdtemp(prefix="peervoice-bench-echo-")
    rate16, speech = wavfile.read(voice.SPEECH)
    speech_s = len(speech) / rate16
    loads = [load_average()]
    rotated = os.path.join(workdir, "rotated.wav")
    wavfile.write(rotated, rate16, np.roll(speech, -len(speech) // 2))
    results = {s: [] for s in systems}
    try:
        for r in range(a.runs):
            for kind in systems:  # interleaved, so slow drifts of the machine's load hit all alike
                for attempt in range(1, ATTEMPTS + 1):
                    voice.log(f"run {r + 1}/{a.runs}: {kind}" + (f" (attempt {attempt})" if attempt > 1 else ""))
                    result = one_run(kind, a.bin, workdir, f"{kind}-{r + 1}-{attempt}", rotated, speech_s)
                    # A call where B's speech never reached A measured nothing (seen under heavy load).
                    heard = result.get("near_alone", {}).get("heard_dbfs", SILENCE_DBFS)
                    if heard > -50:
                        break
                    voice.log(f"{kind}: B's speech did not reach A (A's speaker at {heard} dBFS); again")
                else:
                    raise voice.BenchError(f"{kind}: B's speech did not reach A in {ATTEMPTS} attempts")
                results[kind].append(result)
                loads.append(load_average())
    except (voice.BenchError, voice.Terminated) as e:
        voice.log(f"bench-echo: {e}")
        voice.CHILDREN.stop_all()
        return 1
    finally:
        voice.CHILDREN.stop_all()
        if not a.keep_temp:
            subprocess.run(["rm", "-rf", workdir])
        else:
            voice.log(f"kept {workdir}")
    summary = {k: summarize(v) for k, v in results.items()}
    none = summary.get("none")
    for k, s in summary.items():
        if none and k != "none":
            s["erle_db"] = {w: round(none["return_db"][w] - s["return_db"][w], 1) for w in s["return_db"]}
            s["erle_series_db"] = [round(n - v, 1) for n, v in zip(none["return_series_db"], s["return_series_db"])]
            s["added_latency_ms"] = round(s["latency_ms"] - none["latency_ms"], 1)
    print_table(summary, a.runs)
    print(f"machine load (1-minute average, /proc/loadavg) during the runs: {min(loads):.2f}-{max(loads):.2f}")
    os.makedirs(voice.RESULTS, exist_ok=True)
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": platform.node(), "runs": a.runs, "load_1min": loads, "room": {"delay_s": ROOM_DELAY_S, "gain_db": ROOM_GAIN_DB},
           "summary": summary, "per_run": results}
    with open(os.path.join(voice.RESULTS, "echo.json"), "w") as f:
        json.dump(out, f, indent=1)
    plot(summary, os.path.join(voice.RESULTS, "echo.png"))
    return 0


def run_offline():
    workdir = tempfile.mkdtemp(prefix="peervoice-bench-echo-offline-")
    try:
        delays = offline.latency_by_part(voice.SPEECH, workdir)
        rows = offline.sweep(voice.SPEECH, workdir, voice.log)
        noise = offline.noise_by_level(workdir)
        clean = offline.clean_speech(voice.SPEECH, workdir)
    finally:
        subprocess.run(["rm", "-rf", workdir])
    print("\nbench-echo --offline: the processing's own delay, no far end (speech cross-correlation; a click's peak)")
    print("| parts | speech lag ms | click peak ms | CPU µs per 10 ms block |")
    print("| --- | ---: | ---: | ---: |")
    for d in delays:
        print(f"| {d['parts']} | {d['speech_lag_ms']:.2f} | {d['click_peak_ms']:.2f} | {d['cpu_us_per_block']:.1f} |")
    print("\nbench-echo --offline: pink noise alone (-35 dBFS) through the noise suppressor, 3-6 s in")
    print("| noise suppression | less noise dB |")
    print("| --- | ---: |")
    for row in noise:
        print(f"| {row['noise_level']} | {row['less_noise_db']:.1f} |")
    print("\nbench-echo --offline: clean speech alone (the fixture, nothing plays), PESQ-WB against it, no codec")
    print("| what | lag ms | correlation | PESQ-WB |")
    print("| --- | ---: | ---: | ---: |")
    for row in clean:
        print(f"| {row['what']} | {row['lag_ms']:.2f} | {row['xcorr']:.3f} | {fmt(row['pesq_wb'], '{:.2f}')} |")
    print(f"\nbench-echo --offline: settings sweep (hint {offline.HINT_MS} ms, room {offline.ROOM_MS} ms, "
          f"{offline.ROOM_DB:.0f} dB; ef extended filter, da delay agnostic, sup canceller suppression, dt its level "
          f"in double talk (same: sup throughout), ns noise level, jitter late voice-thread passes)")
    print("| room | settings | ERLE 1-3 s | ERLE 3-7 s | double-talk PESQ-WB | B alone PESQ-WB | latency ms | CPU µs/block |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['room']} | {r['settings']} | {fmt(r['erle_db']['1-3s'])} | {fmt(r['erle_db']['3-7s'])} "
              f"| {fmt(r['double_talk'], '{:.2f}')} | {fmt(r['near_alone'], '{:.2f}')} | {fmt(r['latency_ms'])} "
              f"| {fmt(r.get('cpu_us_per_block'))} |")
    os.makedirs(voice.RESULTS, exist_ok=True)
    with open(os.path.join(voice.RESULTS, "echo-offline.json"), "w") as f:
        json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "host": platform.node(), "delays": delays, "noise": noise, "clean_speech": clean,
                   "sweep": rows}, f, indent=1)
    return 0


def fmt(v, spec="{:.1f}"):
    return "-" if v is None else spec.format(v)


def print_table(summary, runs):
    print(f"\nbench-echo: medians of {runs} runs; room {int(ROOM_DELAY_S * 1000)} ms (+ loopback buffering), "
          f"{ROOM_GAIN_DB:.0f} dB. ERLE against `none`; a fully suppressed window counts as {SILENCE_DBFS:.0f} dBFS.")
    print("| system | echo return 1-3 s | 3-7 s | ERLE 1-3 s | ERLE 3-7 s | double-talk PESQ-WB | B alone PESQ-WB "
          "| B→A latency ms | added ms | CPU B peervoiced % | CPU module % | processing % |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for k, s in summary.items():
        erle = s.get("erle_db", {})
        print(f"| {k} | {fmt(s['return_db']['1-3s'])} | {fmt(s['return_db']['3-7s'])} | {fmt(erle.get('1-3s'))} "
              f"| {fmt(erle.get('3-7s'))} | {fmt(s['double_talk_pesq_wb'], '{:.2f}')} | {fmt(s['near_alone_pesq_wb'], '{:.2f}')} "
              f"| {fmt(s['latency_ms'])} | {fmt(s.get('added_latency_ms'))} | {fmt(s['cpu_pct']['peervoiced_b'], '{:.2f}')} "
              f"| {fmt(s['cpu_pct']['module'], '{:.2f}')} | {fmt(s['cpu_pct']['processing'], '{:.2f}')} |")


def plot(summary, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    t = np.arange(0, 7, 0.5) + 0.25
    for k, s in summary.items():
        if "erle_series_db" in s:
            ax.plot(t, s["erle_series_db"], marker="o", label=k)
    ax.set_xlabel("seconds since A's first word")
    ax.set_ylabel("ERLE (dB, median per 0.5 s)")
    ax.set_title("Echo return loss enhancement, B's room 67 ms / -18 dB")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
