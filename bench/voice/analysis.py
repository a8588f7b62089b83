"""Latency and quality from a 2-channel tap recording (bench/voice).

Channel 0 is what applications captured from the virtual microphone, channel 1 what they played
into the virtual speaker (its monitor). Both come from ONE pw-record stream in ONE graph, so
they are sampled in the same cycles: the lag of channel 1 behind channel 0 is the mouth-to-ear
latency, free of start offsets and clock skew.
"""
import numpy as np
from scipy import signal
from scipy.io import wavfile


def load_tap(path):
    rate, data = wavfile.read(path)
    data = data.astype(np.float64) / 32768.0
    if data.ndim == 1:
        raise ValueError(f"{path}: expected 2 channels")
    return rate, data[:, 0], data[:, 1]


def xcorr_lag(ref, out, max_lag):
    """Lag (samples, 0..max_lag) by which `out` trails `ref`, and the normalized peak there."""
    ref = ref - ref.mean()
    out = out - out.mean()
    c = signal.correlate(out, ref, mode="full", method="fft")
    lags = signal.correlation_lags(len(out), len(ref), mode="full")
    keep = (lags >= 0) & (lags <= max_lag)
    c, lags = c[keep], lags[keep]
    i = int(np.argmax(c))
    norm = np.sqrt(np.sum(ref ** 2) * np.sum(out ** 2)) or 1.0
    return int(lags[i]), float(c[i] / norm)


def speech_span(x, rate, threshold_db=-40.0, window_ms=20):
    """First and last sample of the 20 ms windows louder than `threshold_db` dBFS."""
    spans = talkspurts(x, rate, threshold_db=threshold_db, window_ms=window_ms)
    return (spans[0][0], spans[-1][1]) if spans else None


def talkspurts(x, rate, gap_s=0.25, threshold_db=-40.0, window_ms=20):
    """First and last sample of each stretch of speech in `x`: 20 ms windows louder than
    `threshold_db` dBFS, split where `gap_s` or more of quieter windows come between."""
    w = int(rate * window_ms / 1000)
    n = len(x) // w
    rms = np.sqrt(np.mean(x[: n * w].reshape(n, w) ** 2, axis=1))
    loud = np.nonzero(rms > 10 ** (threshold_db / 20))[0]
    spans = []
    for i in loud:
        if spans and (i - spans[-1][1]) * w < gap_s * rate:
            spans[-1][1] = i + 1
        else:
            spans.append([i, i + 1])
    return [(int(a * w), int(b * w)) for a, b in spans]


def talkspurt_pesq(mic, speaker, rate, lag, within_ms=50.0, pad_s=0.1):
    """PESQ-WB of each talkspurt of the microphone channel against the speaker, each aligned at
    its own lag (within `within_ms` of the global `lag`, samples): where in a call the quality
    goes, e.g. a playout still learning the network in the first talkspurt."""
    within, pad = int(within_ms * rate / 1000), int(pad_s * rate)
    shift = max(0, lag - within)
    scores = []
    for start, end in talkspurts(mic, rate):
        a, b = max(0, start - pad), min(len(mic), end + pad)
        if b + shift + 2 * within > len(speaker):
            break
        own, _ = xcorr_lag(mic[a:b], speaker[a + shift:b + shift + 2 * within], 2 * within)
        scores.append(quality(mic[a:b], speaker[a + shift + own:b + shift + own], rate).get("pesq_wb"))
    return scores


def by_talkspurt(scores, median):
    """`median` of each talkspurt's score over runs (`scores`: one `talkspurt_pesq` list per run;
    a run that found fewer talkspurts counts only for those)."""
    return [median([run[i] for run in scores if len(run) > i]) for i in range(max(map(len, scores), default=0))]


def window_lags(ref, out, rate, max_lag, window_s=0.5):
    """Lag (ms) in each window of the speech that has enough signal (talkspurt-by-talkspurt delay)."""
    w = int(window_s * rate)
    result = []
    for start in range(0, len(ref) - w, w):
        seg = ref[start:start + w]
        if np.sqrt(np.mean(seg ** 2)) < 10 ** (-35 / 20):
            continue
        o = out[start:start + w + max_lag]
        if len(o) < w + max_lag:
            break
        lag, peak = xcorr_lag(seg, o, max_lag)
        if peak > 0.3:
            result.append(round(lag * 1000.0 / rate, 2))
    return result


def quality(ref, deg, rate):
    """PESQ-WB (ITU-T P.862.2, at 16 kHz) and STOI of `deg` against `ref` (already aligned)."""
    res = {}
    try:
        from pesq import pesq
        r16 = signal.resample_poly(ref, 1, rate // 16000)
        d16 = signal.resample_poly(deg, 1, rate // 16000)
        res["pesq_wb"] = round(float(pesq(16000, r16, d16, "wb")), 3)
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        res["pesq_error"] = repr(e)
    try:
        from pystoi import stoi
        res["stoi"] = round(float(stoi(ref, deg, rate, extended=False)), 4)
    except Exception as e:  # noqa: BLE001
        res["stoi_error"] = repr(e)
    return res


def analyze(path, max_lag_ms=1000.0):
    """Latency, correlation, per-window latencies, PESQ-WB (also by talkspurt) and STOI of one tap recording."""
    rate, mic, speaker = load_tap(path)
    return analyze_channels(mic, speaker, rate, max_lag_ms, by_talkspurt=True)


def analyze_channels(mic, speaker, rate, max_lag_ms=1000.0, scores=True, by_talkspurt=False):
    """`analyze` of two channels of one tap (bench/group taps several mics and speakers at once);
    without `scores`, latency and correlation only (no PESQ-WB or STOI); with `by_talkspurt`, also
    the PESQ-WB of each talkspurt (`talkspurt_pesq`)."""
    span = speech_span(mic, rate)
    if span is None:
        return {"error": "no speech in the microphone channel"}
    if np.max(np.abs(speaker)) < 1e-4:
        return {"error": "the speaker channel is silent"}
    start, end = span
    max_lag = int(max_lag_ms * rate / 1000)
    ref = mic[start:end]
    out = speaker[start:min(len(speaker), end + max_lag)]
    lag, peak = xcorr_lag(ref, out, max_lag)
    res = {"latency_ms": round(lag * 1000.0 / rate, 2), "xcorr": round(peak, 4)}
    lags = window_lags(ref, out, rate, max_lag)
    if lags:
        res["window_latency_ms"] = lags
        res["window_min_ms"], res["window_max_ms"] = min(lags), max(lags)
    if not scores:
        return res
    # Quality on the aligned speech, with 0.2 s of context either side.
    pad = int(0.2 * rate)
    a, b = max(0, start - pad), min(len(mic), end + pad)
    deg = speaker[a + lag:b + lag]
    n = min(len(deg), b - a)
    res.update(quality(mic[a:a + n], deg[:n], rate))
    if by_talkspurt:
        res["talkspurt_pesq_wb"] = talkspurt_pesq(mic, speaker, rate, lag)
    return res
