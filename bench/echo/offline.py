"""bench-echo's offline half (`run.py --offline`): the shim itself over simulated rooms.

Deterministic and cheap (no PipeWire, no daemons, no Opus): bench/echo/offline.cpp is PeerVoice's
own shim (Sources/CWebRTCAudio) compiled with a main that feeds it as CaptureProcessing does, and
this module builds the signals, sweeps the settings and scores the output:

  signals   A's speech as the far end: A alone, then A while B talks (B says the same speech rotated
            by half), then B alone; B's microphone = B + the room's echo of the far end + a -85 dBFS
            noise floor. Rooms: `bench` is the live bench's (67 ms, -18 dB, nothing else), `reverb`
            adds an exponential tail (RT60 200 ms, 6 dB below the direct echo), `xrun` is `bench`
            whose delay jumps by one 256-frame quantum, back and forth, every 1.5 s (what a graph
            xrun does to pw-loopback's buffer on a loaded machine). The hint is 10 ms (what the
            devices report); the room's delay is the canceller's to find.
  ERLE      the microphone's level against the output's, from A's first word, 1-3 s and 3-7 s
  PESQ-WB   the output against B's clean speech, in double talk and B alone (aligned by
            cross-correlation); `none` rows score the unprocessed microphone
  latency   the output's lag behind the input with no far end (speech, cross-correlation), per part
  CPU       thread CPU time per 10 ms block in the harness (far end and capture)
  clean     the fixture alone (nothing plays, nothing echoes: bench-voice's A) through the shim,
            each setting toggled, and as CallAudio sends it (digital silence judged before and
            after issue 28), and through webrtc-audio-processing driven as GStreamer's webrtcdsp
            drives it (webrtcdsp.cpp); PESQ-WB against the fixture, no codec
"""
import os
import subprocess

import numpy as np
from scipy import signal
from scipy.io import wavfile

import analysis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RATE = 48000
HINT_MS = 10
ROOM_MS, ROOM_DB = 67, -18.0
FLOOR_DBFS = -85.0
SILENCE_DBFS = -100.0
SOURCES = [os.path.join(ROOT, "Sources", "CWebRTCAudio", "webrtc_audio.cpp"), os.path.join(HERE, "offline.cpp")]
HARNESS = os.path.join(ROOT, ".build", "bench-echo-offline")
WEBRTCDSP = os.path.join(ROOT, ".build", "bench-echo-webrtcdsp")
# CaptureProcessing.silentTailPeak: a silent frame's output at most this loud is digital silence.
SILENT_TAIL_PEAK = 32
SETTING_NAMES = {"ef": "extended_filter", "da": "delay_agnostic", "sup": "suppression_level", "ns": "noise_level",
                 "agc": "gain_control", "aec": "echo_cancel", "nsup": "noise_suppression", "hp": "high_pass",
                 "jitter": "jitter", "dt": "double_talk_suppression_level"}
LEVELS = {"sup": ("low", "moderate", "high"), "ns": ("low", "moderate", "high", "very high"),
          "dt": ("low", "moderate", "high")}


def build_harness():
    """Compiles offline.cpp with the shim (again only when a source is newer than the binary)."""
    return build(SOURCES, HARNESS, [os.path.join(ROOT, "Sources", "CWebRTCAudio", "include", "peervoice_webrtc_audio.h")])


def build_webrtcdsp():
    """Compiles webrtcdsp.cpp (the library as GStreamer's webrtcdsp drives it)."""
    return build([os.path.join(HERE, "webrtcdsp.cpp")], WEBRTCDSP)


def build(sources, binary, headers=()):
    newest = max(os.path.getmtime(p) for p in [*sources, *headers])
    if os.path.exists(binary) and os.path.getmtime(binary) >= newest:
        return binary
    os.makedirs(os.path.dirname(binary), exist_ok=True)
    subprocess.run(["g++", "-O2", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-DWEBRTC_POSIX",
                    "-DWEBRTC_AUDIO_PROCESSING_ONLY_BUILD", "-isystem", "/usr/include/webrtc_audio_processing",
                    "-I", os.path.join(ROOT, "Sources", "CWebRTCAudio", "include"), *sources,
                    "-lwebrtc_audio_processing", "-o", binary], check=True)
    return binary


def level_dbfs(x):
    energy = float(np.mean(x ** 2)) if len(x) else 0.0
    return max(10 * np.log10(energy), SILENCE_DBFS) if energy > 0 else SILENCE_DBFS


def room_response(kind):
    """The echo path's impulse response at 48 kHz."""
    delay = int((ROOM_MS + HINT_MS) * RATE / 1000)
    direct = 10 ** (ROOM_DB / 20)
    if kind == "bench":
        h = np.zeros(delay + 1)
        h[delay] = direct
        return h
    n = int(0.25 * RATE)
    rng = np.random.default_rng(7)
    tail = rng.standard_normal(n) * np.exp(-6.9 * np.arange(n) / (0.2 * RATE))  # -60 dB at 200 ms
    tail = signal.lfilter([0.3], [1, -0.7], tail)  # walls take the highs first
    tail *= direct * 10 ** (-6 / 20) / np.sqrt(np.sum(tail ** 2))
    h = np.zeros(delay + n)
    h[delay] = direct
    h[delay + 48:] += tail[:len(h) - delay - 48]  # the first reflection 1 ms after the direct sound
    return h


def xrun_echo(far):
    """`bench`'s echo with its delay one quantum longer in every other 1.5 s stretch."""
    base = int((ROOM_MS + HINT_MS) * RATE / 1000)
    echo = np.zeros(len(far))
    stretch = int(1.5 * RATE)
    for start in range(0, len(far), stretch):
        delay = base + (256 if (start // stretch) % 2 else 0)
        end = min(start + stretch, len(far))
        src = np.arange(start, end) - delay
        ok = src >= 0
        echo[start:end][ok] = far[src[ok]] * 10 ** (ROOM_DB / 20)
    return echo


class Scene:
    """The three segments' signals for one room, written once as raw 16-bit files."""

    def __init__(self, speech_path, room, workdir):
        rate16, speech16 = wavfile.read(speech_path)
        speech = signal.resample_poly(speech16.astype(np.float64) / 32768.0, RATE // rate16, 1)
        n = len(speech)
        self.n = n
        self.a_start = analysis.speech_span(speech, RATE)[0]
        rotated = np.roll(speech, -n // 2)
        self.far = np.concatenate([speech, speech, np.zeros(n)])
        self.near = np.concatenate([np.zeros(n), rotated, rotated])
        if room == "xrun":
            echo = xrun_echo(self.far)
        else:
            echo = signal.fftconvolve(self.far, room_response(room))[:len(self.far)]
        floor = np.random.default_rng(3).standard_normal(len(self.far)) * 10 ** (FLOOR_DBFS / 20)
        self.mic = self.near + echo + floor
        self.paths = {}
        for name, x in (("far", self.far), ("mic", self.mic)):
            path = os.path.join(workdir, f"{room}-{name}.s16")
            np.clip(np.round(x * 32768), -32768, 32767).astype("<i2").tofile(path)
            self.paths[name] = path
        self.mic = np.fromfile(self.paths["mic"], dtype="<i2") / 32768.0
        self.workdir, self.room = workdir, room

    def process(self, harness, settings, far=None, mic=None):
        """Runs the harness; returns its output and its report (cpu_us_per_block, voiced_share)."""
        out = os.path.join(self.workdir, f"{self.room}-out.s16")
        args = [f"{SETTING_NAMES[k]}={v}" for k, v in settings.items()]
        done = subprocess.run([harness, far or self.paths["far"], mic or self.paths["mic"], out, str(HINT_MS), *args],
                              check=True, capture_output=True, text=True)
        report = {k: float(v) for k, v in (line.split() for line in done.stdout.splitlines())}
        return np.fromfile(out, dtype="<i2") / 32768.0, report

    def score(self, out):
        n, start = self.n, self.a_start
        erle = {}
        for label, (t1, t2) in (("1-3s", (1, 3)), ("3-7s", (3, 7))):
            a, b = start + int(t1 * RATE), min(start + int(t2 * RATE), n)
            erle[label] = round(level_dbfs(self.mic[a:b]) - level_dbfs(out[a:b]), 1)
        result = {"erle_db": erle}
        # B alone first: its lag aligns the double talk too (the processing's delay is fixed).
        ref = self.near[2 * n:3 * n]
        lag, _ = analysis.xcorr_lag(ref, out[2 * n:3 * n], int(0.05 * RATE))
        result["latency_ms"] = round(1000 * lag / RATE, 2)
        for label, seg in (("double_talk", 1), ("near_alone", 2)):
            ref = self.near[seg * n:(seg + 1) * n - lag]
            deg = out[seg * n + lag:(seg + 1) * n]
            result[label] = analysis.quality(ref, deg, RATE).get("pesq_wb")
        return result


def settings_label(settings):
    parts = []
    for key, value in settings.items():
        if key == "nsup":
            parts.append("ns=off")
        elif key == "dt" and value < 0:
            parts.append("dt=same")
        else:
            parts.append(f"{key}={LEVELS[key][value]}" if key in LEVELS else f"{key}={value}")
    return " ".join(parts)


def sweep_settings():
    """The canceller's fixed suppression (`dt=same`) against the noise suppressor's level with the
    module's filter and delay mode; then moderate with low in double talk (`dt=low`, shipped) at
    each noise level; each of the other knobs once, moved from the shipped setup; and two settings
    again with the voice thread's passes coming late (`jitter`)."""
    grid = [{"ef": 1, "da": 1, "sup": sup, "dt": -1, "ns": ns} for sup in (0, 1, 2) for ns in (0, 1, 2)]
    grid += [{"ef": 1, "da": 1, "sup": sup, "dt": -1, "nsup": 0} for sup in (0, 1, 2)]
    grid += [{"ef": 1, "da": 1, "sup": sup, "dt": 0, "ns": ns} for sup in (1, 2) for ns in (0, 1, 2)]
    grid += [{"ef": 1, "da": 1, "sup": 1, "dt": 0, "nsup": 0}]
    grid += [{"ef": 1, "da": 0, "sup": 1, "dt": 0, "ns": 1}, {"ef": 0, "da": 1, "sup": 1, "dt": 0, "ns": 1},
             {"ef": 1, "da": 1, "sup": 1, "dt": 0, "ns": 1, "agc": 1}]
    grid += [{"ef": 1, "da": 1, "sup": 0, "dt": -1, "ns": 1, "jitter": 2},
             {"ef": 1, "da": 1, "sup": 1, "dt": 0, "ns": 1, "jitter": 2}]
    return grid


def sweep(speech_path, workdir, log, rooms=("bench", "reverb", "xrun")):
    """Each of ``sweep_settings`` in each room, and the unprocessed microphone."""
    harness = build_harness()
    rows = []
    for room in rooms:
        scene = Scene(speech_path, room, workdir)
        none = scene.score(scene.mic)
        rows.append({"room": room, "settings": "none (unprocessed)", **none, "erle_db": {"1-3s": 0, "3-7s": 0}})
        for settings in sweep_settings():
            out, report = scene.process(harness, settings)
            row = {"room": room, "settings": settings_label(settings), "values": settings, **scene.score(out),
                   "cpu_us_per_block": report["cpu_us_per_block"]}
            log(f"offline {room}: {row['settings']}: ERLE {row['erle_db']['1-3s']}/{row['erle_db']['3-7s']} dB, "
                f"double talk {row['double_talk']}, B alone {row['near_alone']}")
            rows.append(row)
    return rows


def latency_by_part(speech_path, workdir):
    """The processing's own delay with no far end: B's speech alone through each set of parts."""
    harness = build_harness()
    scene = Scene(speech_path, "bench", workdir)
    n = scene.n
    near = scene.near[n:2 * n]
    far_path, mic_path = os.path.join(workdir, "silent-far.s16"), os.path.join(workdir, "near.s16")
    np.zeros(n, dtype="<i2").tofile(far_path)
    np.round(near * 32768).astype("<i2").tofile(mic_path)
    rows = []
    parts = {"nothing (voice activity only)": {"aec": 0, "nsup": 0, "hp": 0},
             "high-pass": {"aec": 0, "nsup": 0, "hp": 1},
             "noise suppression": {"aec": 0, "nsup": 1, "hp": 0},
             "echo cancellation": {"aec": 1, "nsup": 0, "hp": 0},
             "echo cancellation + noise suppression": {"aec": 1, "nsup": 1, "hp": 0},
             "all three (shipped)": {"aec": 1, "nsup": 1, "hp": 1}}
    for label, settings in parts.items():
        out, report = scene.process(harness, settings, far=far_path, mic=mic_path)
        lag, peak = analysis.xcorr_lag(near, out, int(0.05 * RATE))
        # A click through the same parts: where its strongest sample comes out.
        click = np.zeros(n)
        click[RATE::RATE // 2] = 0.5
        click_path = os.path.join(workdir, "click.s16")
        np.round(click * 32768).astype("<i2").tofile(click_path)
        click_out, _ = scene.process(harness, settings, far=far_path, mic=click_path)
        first = RATE
        peak_at = int(np.argmax(np.abs(click_out[first:first + int(0.05 * RATE)])))
        rows.append({"parts": label, "speech_lag_ms": round(1000 * lag / RATE, 2), "xcorr": round(peak, 3),
                     "click_peak_ms": round(1000 * peak_at / RATE, 2), "cpu_us_per_block": report["cpu_us_per_block"]})
    return rows


def noise_by_level(workdir):
    """Pink noise alone (-35 dBFS, no far end) through each noise suppressor level: how much less of
    it comes out, 3-6 s in (the service test asks for 6 dB less in B's pauses)."""
    harness = build_harness()
    n = 6 * RATE
    spectrum = np.fft.rfft(np.random.default_rng(1).standard_normal(n))
    spectrum[1:] /= np.sqrt(np.fft.rfftfreq(n, 1 / RATE)[1:])
    spectrum[0] = 0
    pink = np.fft.irfft(spectrum, n)
    pink *= 10 ** (-35 / 20) / np.sqrt(np.mean(pink ** 2))
    far_path, mic_path, out_path = (os.path.join(workdir, name) for name in ("noise-far.s16", "noise.s16", "noise-out.s16"))
    np.zeros(n, dtype="<i2").tofile(far_path)
    np.round(pink * 32768).astype("<i2").tofile(mic_path)
    pink = np.fromfile(mic_path, dtype="<i2") / 32768.0
    rows = []
    for level, name in enumerate(LEVELS["ns"]):
        subprocess.run([harness, far_path, mic_path, out_path, str(HINT_MS), f"noise_level={level}"], check=True,
                       capture_output=True)
        out = np.fromfile(out_path, dtype="<i2") / 32768.0
        judged = slice(3 * RATE, n)
        rows.append({"noise_level": name, "less_noise_db": round(level_dbfs(pink[judged]) - level_dbfs(out[judged]), 1)})
    return rows


def sent(mic, out, frame, judged_on_output):
    """What CallAudio hands the encoder of the processed `out`, in frames of `frame` samples: a
    frame of digital silence goes as zeros (the encoder rests on it). Judged on the captured frame
    alone, as before issue 28, or on it and on what the processing made of it (CaptureProcessing)."""
    result = out.copy()
    for start in range(0, len(out) - frame + 1, frame):
        silent = not mic[start:start + frame].any()
        if judged_on_output:
            silent = silent and np.abs(out[start:start + frame]).max() <= SILENT_TAIL_PEAK
        if silent:
            result[start:start + frame] = 0
    return result


def clean_speech(speech_path, workdir):
    """The fixture alone (1 s of digital silence before, 0.5 s after) through the shim as shipped
    and with each setting toggled, then as sent at both frame sizes, then through webrtcdsp.cpp:
    the lag, the correlation at it and PESQ-WB against the fixture, as bench-voice's A would send
    it before the codec (nothing plays: the far end is silence)."""
    harness, gst = build_harness(), build_webrtcdsp()
    rate16, speech16 = wavfile.read(speech_path)
    speech = signal.resample_poly(speech16.astype(np.float64) / 32768.0, RATE // rate16, 1)
    speech = np.concatenate([np.zeros(RATE), speech, np.zeros(RATE // 2)])
    mic = np.clip(np.round(speech * 32768), -32768, 32767).astype("<i2")
    n = len(mic)
    mic_path, far_path, out_path = (os.path.join(workdir, name) for name in ("clean.s16", "clean-far.s16", "clean-out.s16"))
    mic.tofile(mic_path)
    np.zeros(n, dtype="<i2").tofile(far_path)
    reference = mic / 32768.0

    def score(label, out):
        lag, peak = analysis.xcorr_lag(reference, out / 32768.0, int(0.05 * RATE))
        quality = analysis.quality(reference[:n - lag], out[lag:] / 32768.0, RATE)
        return {"what": label, "lag_ms": round(1000 * lag / RATE, 2), "xcorr": round(peak, 3), "pesq_wb": quality.get("pesq_wb")}

    def shim(settings, hint=HINT_MS):
        args = [f"{SETTING_NAMES[k]}={v}" for k, v in settings.items()]
        subprocess.run([harness, far_path, mic_path, out_path, str(hint), *args], check=True, capture_output=True)
        return np.fromfile(out_path, dtype="<i2")

    def webrtcdsp(settings):
        subprocess.run([gst, mic_path, out_path, *[f"{k}={v}" for k, v in settings.items()]], check=True, capture_output=True)
        return np.fromfile(out_path, dtype="<i2")

    rows = [score("the fixture as captured", mic)]
    shipped = shim({})
    rows.append(score("shim, shipped: what the processor gives", shipped))
    for frame_ms in (20, 10):
        for on_output, when in ((False, "judged on the captured frame (before)"), (True, "judged on it and the output (now)")):
            rows.append(score(f"  as sent at {frame_ms} ms frames, digital silence {when}",
                              sent(mic, shipped, frame_ms * RATE // 1000, on_output)))
    for label, settings, hint in (("shim, no double-talk switch (moderate throughout)", {"dt": -1}, HINT_MS),
                                  ("shim, delay hint 0 ms", {}, 0), ("shim, delay hint 100 ms", {}, 100),
                                  ("shim, webrtcdsp's levels (moderate, no switch, noise moderate)", {"dt": -1, "ns": 1}, HINT_MS),
                                  ("shim, high-pass only", {"aec": 0, "nsup": 0}, HINT_MS),
                                  ("shim, noise suppression low only", {"aec": 0, "hp": 0}, HINT_MS),
                                  ("shim, noise suppression moderate only", {"aec": 0, "hp": 0, "ns": 1}, HINT_MS),
                                  ("shim, echo cancellation only", {"nsup": 0, "hp": 0}, HINT_MS),
                                  ("shim, no echo cancellation (headphones)", {"aec": 0}, HINT_MS)):
        rows.append(score(label, shim(settings, hint)))
    for label, settings in (("webrtcdsp, as bench-voice's gstreamer-dsp sets it (int16)", {}),
                            ("webrtcdsp, the float interface", {"int16": 0}),
                            ("webrtcdsp, noise suppression low", {"ns_level": 0}),
                            ("webrtcdsp, no voice detection", {"vad": 0}),
                            ("webrtcdsp, far end never fed", {"far": 0}),
                            ("webrtcdsp, PeerVoice's levels, nothing else", {"ns_level": 0, "vad": 0})):
        rows.append(score(label, webrtcdsp(settings)))
    return rows
