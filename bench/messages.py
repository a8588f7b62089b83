#!/usr/bin/python3
"""PeerVoice text-message benchmark (run it with `make bench-messages`; see bench/README.md).

For each run it starts two private `dbus-daemon --session` buses and one real peervoiced on
each (`--listen 127.0.0.1:0 --state-dir <fresh dir>`), connects A to B over TCP and measures,
from this one process watching both buses (one monotonic clock):

  baseline    N ListPeers calls on A with the same window as the Send test (the bus and
              GDBus round trip with no messaging work), and ListPeers round trips at the
              latency test's rate
  throughput  N Send(B, text) calls on A, pipelined (one client connection, at most WINDOW
              calls in flight), from the first call to the last MessageReceived on B;
              lost, duplicated, reordered, MessageDelivered on A
  latency     Send at a steady RATE/s for DURATION s: Send -> MessageReceived on B
              (also Send -> reply and Send -> MessageDelivered on A)

Then it stops the daemons and reports the size of their state directories (the journals).
Every run uses fresh buses, daemons and state directories; the phases of one run share them.
It prints a table with the median of the runs and writes JSON. It asserts nothing: the exit
status is non-zero only when a run could not be carried out (a daemon failed to start, crashed
or stopped answering).

Needs python3-gi (Debian's /usr/bin/python3), dbus-daemon and a release peervoiced (--bin).
"""

import argparse
import datetime
import json
import math
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import gi

gi.require_version("GLib", "2.0")
gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

BUS_NAME = "org.example.PeerVoice"
OBJECT_PATH = "/org/example/PeerVoice"
INTERFACE = "org.example.PeerVoice"
TARGET_MSGS_PER_S = 2000.0
TARGET_P99_MS = 10.0
CALL_TIMEOUT_MS = 30_000
CLK_TCK = os.sysconf("SC_CLK_TCK")


def now():
    """Seconds on the monotonic clock (CLOCK_MONOTONIC), used for every timestamp."""
    return time.perf_counter()


class BenchError(Exception):
    """The run could not be carried out (as opposed to a bad measurement, which is reported)."""


class Terminated(BaseException):
    """SIGTERM/SIGINT: unwind through the finally blocks that stop the children."""


def on_signal(signum, _frame):
    raise Terminated(f"signal {signum}")


# ---------------------------------------------------------------------------------------------
# Main loop


CTX = GLib.MainContext.default()


def run_until(predicate, timeout):
    """Dispatches GLib events until predicate() is true (True) or timeout seconds pass (False)."""
    deadline = now() + timeout
    # A periodic wake-up so the deadline and Python signal handlers are checked while idle.
    tick = GLib.timeout_add(20, lambda: True)
    try:
        while not predicate():
            if now() >= deadline:
                return False
            CTX.iteration(True)
        return True
    finally:
        GLib.source_remove(tick)


# ---------------------------------------------------------------------------------------------
# Child processes


class Child:
    """A child process with stdout+stderr in a log file; stopped by PID with SIGTERM."""

    def __init__(self, name, argv, log_path, env=None):
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb")
        # Default signal dispositions in the child (restore_signals, no new session), so
        # SIGTERM from stop() reaches it.
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=False, restore_signals=True, close_fds=True)
        self.pid = self.proc.pid
        self.exit_status = None

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=5.0):
        """SIGTERM, wait; SIGKILL if it lingers. Returns the exit status (negative: signal)."""
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait()
                self.exit_status = "killed after SIGTERM timeout"
        if self.exit_status is None:
            self.exit_status = self.proc.returncode
        if not self._log.closed:
            self._log.close()
        return self.exit_status

    def cpu_seconds(self):
        """utime+stime of the process (all threads), or None once it is gone."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / CLK_TCK
        except (OSError, IndexError, ValueError):
            return None

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


def start_bus(directory, name):
    socket_path = os.path.join(directory, f"{name}.socket")
    address = "unix:path=" + socket_path
    bus = Child(f"dbus-daemon {name}",
                ["dbus-daemon", "--session", "--nofork", "--nopidfile", "--address=" + address],
                os.path.join(directory, f"{name}.log"))
    deadline = now() + 10
    while not os.path.exists(socket_path):
        if not bus.alive() or now() > deadline:
            raise BenchError(f"dbus-daemon for {name} did not start: {bus.log_text().strip()}")
        time.sleep(0.01)
    return bus, address


def connect_bus(address):
    flags = (Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION)
    return Gio.DBusConnection.new_for_address_sync(address, flags, None, None)


def name_owner(conn):
    try:
        reply = conn.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "GetNameOwner", GLib.Variant("(s)", (BUS_NAME,)), GLib.VariantType("(s)"),
                               Gio.DBusCallFlags.NONE, 2000, None)
        return reply.unpack()[0]
    except GLib.Error:
        return None


def start_daemon(binary, directory, name, bus_address, conn, children):
    """Starts peervoiced on the bus (registered in children at once, so it is stopped and its
    log kept even if it fails to start); returns (child, unique bus name, state dir)."""
    state = os.path.join(directory, f"{name}-state")
    env = dict(os.environ)
    env["DBUS_SESSION_BUS_ADDRESS"] = bus_address
    env.pop("JOURNAL_STREAM", None)
    daemon = Child(f"peervoiced {name}",
                   [binary, "--listen", "127.0.0.1:0", "--state-dir", state, "--name", f"bench-{name}"],
                   os.path.join(directory, f"peervoiced-{name}.log"), env=env)
    children[f"daemon_{name}"] = daemon
    deadline = now() + 15
    while True:
        owner = name_owner(conn)
        if owner:
            return daemon, owner, state
        if not daemon.alive() or now() > deadline:
            daemon.stop()
            lines = []
            for line in daemon.log_text().splitlines():
                if line.strip() and line not in lines:
                    lines.append(line.strip())
            head = " | ".join(lines)[:400]
            raise BenchError(f"peervoiced {name} did not take {BUS_NAME} (exit status {daemon.exit_status}; "
                             f"its log: {head})")
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------------
# Statistics


def percentile(sorted_values, p):
    """Nearest-rank percentile of an ascending list (p in 0..100); None when empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def latency_summary(seconds):
    """p50/p90/p99/max/mean in ms of a list of latencies in seconds."""
    values = sorted(s * 1000.0 for s in seconds)
    if not values:
        return {"count": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None, "mean_ms": None}
    return {"count": len(values), "p50_ms": percentile(values, 50), "p90_ms": percentile(values, 90),
            "p99_ms": percentile(values, 99), "max_ms": values[-1], "mean_ms": statistics.fmean(values)}


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


# ---------------------------------------------------------------------------------------------
# The PeerVoice clients


class Service:
    """One daemon as seen from this process: calls go to its unique name (so a crashed daemon
    is never replaced by bus activation), signals are recorded with their arrival time."""

    def __init__(self, conn, unique_name):
        self.conn = conn
        self.dest = unique_name
        self.handlers = {}
        self.subscriptions = [
            conn.signal_subscribe(unique_name, INTERFACE, member, OBJECT_PATH, None, Gio.DBusSignalFlags.NONE,
                                  self._on_signal, None)
            for member in ("MessageReceived", "MessageDelivered", "MessageFailed", "PeerStateChanged",
                           "PairingRequested")]

    def on(self, member, handler):
        self.handlers[member] = handler

    def _on_signal(self, _conn, _sender, _path, _iface, member, params, _data):
        t = now()
        handler = self.handlers.get(member)
        if handler:
            # Every argument of the signals used here is a string; get_string is far cheaper
            # than unpack() in Python, and this runs thousands of times a second.
            handler(t, [params.get_child_value(i).get_string() for i in range(params.n_children())])

    def call_sync(self, method, params=None, reply_type=None, timeout_ms=CALL_TIMEOUT_MS):
        return self.conn.call_sync(self.dest, OBJECT_PATH, INTERFACE, method, params,
                                   GLib.VariantType(reply_type) if reply_type else None,
                                   Gio.DBusCallFlags.NONE, timeout_ms, None)

    def call_async(self, method, params, reply_type, callback):
        """callback(result_or_None, error_or_None, reply_time)."""
        def done(conn, res, _data):
            try:
                reply = conn.call_finish(res)
            except GLib.Error as error:
                callback(None, error, now())
                return
            callback(reply, None, now())
        self.conn.call(self.dest, OBJECT_PATH, INTERFACE, method, params, reply_type,
                       Gio.DBusCallFlags.NONE, CALL_TIMEOUT_MS, None, done, None)

    def get_property(self, name):
        reply = self.conn.call_sync(self.dest, OBJECT_PATH, "org.freedesktop.DBus.Properties", "Get",
                                    GLib.Variant("(ss)", (INTERFACE, name)), GLib.VariantType("(v)"),
                                    Gio.DBusCallFlags.NONE, CALL_TIMEOUT_MS, None)
        return reply.unpack()[0]

    def close(self):
        for sub in self.subscriptions:
            self.conn.signal_unsubscribe(sub)
        self.subscriptions = []
        self.handlers = {}


def close_clients(services, conns):
    """Unsubscribes the services and closes their bus connections."""
    for service in services:
        service.close()
    for conn in conns:
        try:
            conn.close_sync(None)
        except GLib.Error:
            pass


def windowed_calls(service, method, make_params, reply_type, n, window, on_reply=None):
    """Issues n calls keeping at most `window` in flight (the next call goes out from the
    previous reply's callback). Returns (call times, reply times, errors)."""
    call_t = [None] * n
    reply_t = [None] * n
    errors = []
    state = {"next": 0, "done": 0}
    vtype = GLib.VariantType(reply_type) if reply_type else None

    def issue():
        i = state["next"]
        state["next"] += 1
        params = make_params(i)
        call_t[i] = now()
        service.call_async(method, params, vtype, lambda reply, error, t: replied(i, reply, error, t))

    def replied(i, reply, error, t):
        reply_t[i] = t
        state["done"] += 1
        if error is not None:
            errors.append((i, error.message))
        elif on_reply:
            on_reply(i, reply, t)
        if state["next"] < n:
            issue()

    for _ in range(min(window, n)):
        issue()
    run_until(lambda: state["done"] >= n, CALL_TIMEOUT_MS / 1000 + 30)
    return call_t, reply_t, errors


def paced_calls(service, method, make_params, reply_type, n, rate, on_reply=None, wait_replies=True):
    """Issues n calls at a steady `rate`/s on an absolute schedule (a late call does not shift
    the later ones). Returns (call times, reply times, errors, worst lateness in s)."""
    call_t = [None] * n
    reply_t = [None] * n
    errors = []
    state = {"next": 0, "done": 0, "late": 0.0}
    vtype = GLib.VariantType(reply_type) if reply_type else None
    interval = 1.0 / rate
    start = now() + 0.05

    def replied(i, reply, error, t):
        reply_t[i] = t
        state["done"] += 1
        if error is not None:
            errors.append((i, error.message))
        elif on_reply:
            on_reply(i, reply, t)

    def tick():
        t = now()
        while state["next"] < n and start + state["next"] * interval <= t:
            i = state["next"]
            state["next"] += 1
            state["late"] = max(state["late"], t - (start + i * interval))
            call_t[i] = now()
            service.call_async(method, make_params(i), vtype, lambda reply, error, rt, i=i: replied(i, reply, error, rt))
            t = now()
        if state["next"] >= n:
            return False
        delay_ms = max(0, math.ceil((start + state["next"] * interval - now()) * 1000))
        GLib.timeout_add(delay_ms, tick, priority=GLib.PRIORITY_HIGH)
        return False

    GLib.timeout_add(max(0, math.ceil((start - now()) * 1000)), tick, priority=GLib.PRIORITY_HIGH)
    run_until(lambda: state["next"] >= n, n / rate + 30)
    if wait_replies:
        run_until(lambda: state["done"] >= n, CALL_TIMEOUT_MS / 1000 + 5)
    return call_t, reply_t, errors, state["late"]


class MessageRecorder:
    """Records MessageReceived on B and MessageDelivered/MessageFailed on A for one phase, whose
    texts start with `tag`; anything else is counted as stray."""

    def __init__(self, a, b, tag):
        self.tag = tag
        self.received = []      # (arrival time, message id, seq parsed from the text, text ok)
        self.delivered = []     # (arrival time, message id)
        self.failed = []        # (arrival time, message id, reason)
        self.stray = 0
        self.received_ids = set()
        self.delivered_ids = set()
        self.last_event = now()
        a.on("MessageDelivered", self._delivered)
        a.on("MessageFailed", self._failed)
        b.on("MessageReceived", self._received)

    def _received(self, t, args):
        _peer, message_id, text = args
        self.last_event = t
        if not text.startswith(self.tag):
            self.stray += 1
            return
        try:
            seq = int(text[len(self.tag):].split(" ", 1)[0])
        except ValueError:
            seq = None
        self.received.append((t, message_id, seq, len(text)))
        self.received_ids.add(message_id)

    def _delivered(self, t, args):
        _peer, message_id = args
        self.last_event = t
        self.delivered.append((t, message_id))
        self.delivered_ids.add(message_id)

    def _failed(self, t, args):
        _peer, message_id, reason = args
        self.last_event = t
        self.failed.append((t, message_id, reason))

    def wait(self, ids, idle_timeout):
        """Waits until every id is received and delivered, or nothing arrives for idle_timeout s."""
        wanted = {i for i in ids if i}
        def complete():
            if wanted <= self.received_ids and wanted <= self.delivered_ids:
                return True
            return now() - self.last_event > idle_timeout
        run_until(complete, 3600)

    def analyse(self, ids, texts_len):
        """Counts against the Send results: ids[seq] is the id Send returned for message seq."""
        seq_of = {message_id: seq for seq, message_id in enumerate(ids) if message_id}
        counts = {}
        first_arrival = {}
        reordered = 0
        highest = -1
        unknown = 0
        text_mismatch = 0
        for t, message_id, text_seq, length in self.received:
            seq = seq_of.get(message_id)
            if seq is None:
                unknown += 1
                continue
            if text_seq != seq or length != texts_len[seq]:
                text_mismatch += 1
            counts[message_id] = counts.get(message_id, 0) + 1
            if counts[message_id] > 1:
                continue
            first_arrival[message_id] = t
            if seq < highest:
                reordered += 1
            highest = max(highest, seq)
        delivered_first = {}
        delivered_dups = 0
        for t, message_id in self.delivered:
            if message_id in delivered_first:
                delivered_dups += 1
            else:
                delivered_first[message_id] = t
        accepted = len(seq_of)
        return {
            "accepted": accepted,
            "received_unique": len(first_arrival),
            "lost": sum(1 for message_id in seq_of if message_id not in first_arrival),
            "duplicated": sum(c - 1 for c in counts.values()),
            "reordered": reordered,
            "unknown_ids_received": unknown,
            "text_mismatch": text_mismatch,
            "delivered": sum(1 for message_id in seq_of if message_id in delivered_first),
            "delivered_duplicated": delivered_dups,
            "failed": len(self.failed),
            "failed_reasons": sorted({reason for _, _, reason in self.failed})[:5],
            "stray_signals": self.stray,
        }, first_arrival, delivered_first


# ---------------------------------------------------------------------------------------------
# Phases


def make_text(tag, seq, size):
    head = f"{tag}{seq:06d} "
    return head + "x" * max(0, size - len(head))


def cpu_snapshot(children):
    snap = {name: child.cpu_seconds() for name, child in children.items()}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    snap["client"] = usage.ru_utime + usage.ru_stime
    snap["_t"] = now()
    return snap


def cpu_report(before, after, messages):
    """CPU seconds, % of the measured interval and microseconds per message, per process."""
    wall = after["_t"] - before["_t"]
    out = {"_interval_s": round(wall, 3)}
    for name, start in before.items():
        if name == "_t":
            continue
        end = after.get(name)
        if start is None or end is None:
            continue
        seconds = end - start
        out[name] = {"cpu_s": round(seconds, 3), "cpu_pct": round(100 * seconds / wall, 1) if wall else None,
                     "cpu_us_per_msg": round(1e6 * seconds / messages, 1) if messages else None}
    return out


def phase_baseline(a, args, children):
    empty = GLib.Variant("()", ())
    before = cpu_snapshot(children)
    call_t, reply_t, errors = windowed_calls(a, args.baseline_method, lambda i: empty, None, args.n, args.window)
    after = cpu_snapshot(children)
    done = [t for t in reply_t if t is not None]
    wall = (max(done) - call_t[0]) if done else None
    result = {
        "method": args.baseline_method,
        "calls": args.n,
        "errors": len(errors),
        "first_errors": [message for _, message in errors[:3]],
        "seconds": wall,
        "calls_per_s": (len(done) - len(errors)) / wall if wall else None,
        "cpu": cpu_report(before, after, args.n),
    }
    # Round trips at the latency test's rate: what one call costs with nothing else in flight.
    n = max(1, int(args.rate * args.baseline_duration))
    call_t, reply_t, errors, late = paced_calls(a, args.baseline_method, lambda i: empty, None, n, args.rate)
    rtt = [r - c for c, r in zip(call_t, reply_t) if c is not None and r is not None]
    result["paced"] = {"calls": n, "rate": args.rate, "errors": len(errors), "worst_schedule_lateness_ms": late * 1000,
                       "round_trip": latency_summary(rtt)}
    return result


def phase_throughput(a, b, peer_b, args, children, tag):
    texts = [make_text(tag, i, args.text_bytes) for i in range(args.n)]
    ids = [None] * args.n
    recorder = MessageRecorder(a, b, tag)

    def on_reply(i, reply, _t):
        ids[i] = reply.get_child_value(0).get_string()

    before = cpu_snapshot(children)
    call_t, reply_t, errors = windowed_calls(
        a, "Send", lambda i: GLib.Variant("(ss)", (peer_b, texts[i])), "(s)", args.n, args.window, on_reply)
    accepted_at = now()
    recorder.wait(ids, args.idle_timeout)
    after = cpu_snapshot(children)
    counts, first_arrival, delivered_first = recorder.analyse(ids, [len(t) for t in texts])
    t0 = call_t[0]
    last_received = max(first_arrival.values()) if first_arrival else None
    last_delivered = max(delivered_first.values()) if delivered_first else None
    last_reply = max(t for t in reply_t if t is not None)
    wall = (last_received - t0) if last_received else None
    result = {
        "messages": args.n,
        "window": args.window,
        "text_bytes": args.text_bytes,
        "send_errors": len(errors),
        "first_send_errors": [message for _, message in errors[:3]],
        **counts,
        "seconds_to_last_received": wall,
        "messages_per_s": counts["received_unique"] / wall if wall else None,
        "send_replies_per_s": (args.n - len(errors)) / (last_reply - t0) if last_reply > t0 else None,
        "seconds_to_last_reply": last_reply - t0,
        "seconds_to_last_delivered": (last_delivered - t0) if last_delivered else None,
        "waited_after_last_reply_s": now() - accepted_at,
        "cpu": cpu_report(before, after, args.n),
    }
    return result


def phase_latency(a, b, peer_b, args, tag):
    n = int(args.rate * args.duration)
    texts = [make_text(tag, i, args.text_bytes) for i in range(n)]
    ids = [None] * n
    recorder = MessageRecorder(a, b, tag)

    def on_reply(i, reply, _t):
        ids[i] = reply.get_child_value(0).get_string()

    call_t, reply_t, errors, late = paced_calls(
        a, "Send", lambda i: GLib.Variant("(ss)", (peer_b, texts[i])), "(s)", n, args.rate, on_reply)
    recorder.wait(ids, args.idle_timeout)
    counts, first_arrival, delivered_first = recorder.analyse(ids, [len(t) for t in texts])
    received_lat, reply_lat, delivered_lat = [], [], []
    for i, message_id in enumerate(ids):
        if message_id is None:
            continue
        reply_lat.append(reply_t[i] - call_t[i])
        if message_id in first_arrival:
            received_lat.append(first_arrival[message_id] - call_t[i])
        if message_id in delivered_first:
            delivered_lat.append(delivered_first[message_id] - call_t[i])
    return {
        "messages": n,
        "rate": args.rate,
        "duration_s": args.duration,
        "text_bytes": args.text_bytes,
        "send_errors": len(errors),
        "first_send_errors": [message for _, message in errors[:3]],
        "worst_schedule_lateness_ms": late * 1000,
        **counts,
        "send_to_received": latency_summary(received_lat),
        "send_to_reply": latency_summary(reply_lat),
        "send_to_delivered": latency_summary(delivered_lat),
    }


def disk_usage(path):
    total_bytes = 0
    total_blocks = 0
    files = {}
    for root, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            st = os.lstat(full)
            total_bytes += st.st_size
            total_blocks += st.st_blocks * 512
            files[os.path.relpath(full, path)] = st.st_size
    return {"bytes": total_bytes, "allocated_bytes": total_blocks, "files": dict(sorted(files.items()))}


def interesting_log_lines(text, limit=30):
    words = ("warning", "error", "critical", "fatal", "crash", "signal", "disconnected", "closed", "full")
    lines = []
    for line in text.splitlines():
        if line.strip() and line not in lines and any(word in line.lower() for word in words):
            lines.append(line)
    return lines[:limit]


# ---------------------------------------------------------------------------------------------
# One run


def one_run(index, args, workdir, logs_dir):
    directory = os.path.join(workdir, f"run{index}")
    os.makedirs(directory)
    children = {}
    services = []
    conns = []
    result = {"run": index, "loadavg_before": os.getloadavg()}
    try:
        bus_a, address_a = start_bus(directory, "bus-a")
        children["bus_a"] = bus_a
        bus_b, address_b = start_bus(directory, "bus-b")
        children["bus_b"] = bus_b
        conn_a, conn_b = connect_bus(address_a), connect_bus(address_b)
        conns += [conn_a, conn_b]
        _, owner_a, state_a = start_daemon(args.bin, directory, "a", address_a, conn_a, children)
        _, owner_b, state_b = start_daemon(args.bin, directory, "b", address_b, conn_b, children)
        a, b = Service(conn_a, owner_a), Service(conn_b, owner_b)
        services += [a, b]
        result["pids"] = {name: child.pid for name, child in children.items()}

        listen_b = b.get_property("ListenAddress")
        peer_b = "ip:" + listen_b
        # First contact: both sides show the pairing code and wait for their person, played here
        # by answering each PairingRequested with ConfirmPairing(true).
        for service in (a, b):
            service.on("PairingRequested", lambda _t, args, service=service: service.call_async(
                "ConfirmPairing", GLib.Variant("(sb)", (args[0], True)), None, lambda *_: None))
        connected = {}
        t = now()
        a.call_async("Connect", GLib.Variant("(s)", (peer_b,)), None,
                     lambda reply, error, _t: connected.update(done=True, error=error))
        run_until(lambda: "done" in connected, 60)
        if connected.get("error") is not None or "done" not in connected:
            raise BenchError(f"Connect failed: {connected.get('error', 'no reply within 60 s')}")
        result["connect_ms"] = (now() - t) * 1000
        a.on("PairingRequested", None)
        b.on("PairingRequested", None)
        # B's side of the link opens when A's HELLO arrives; let both settle.
        run_until(lambda: False, 0.2)
        peers_b = b.call_sync("ListPeers", None, "(a(ssss))").unpack()[0]
        result["peer_b"] = peer_b
        result["peers_seen_by_b"] = [list(p) for p in peers_b]

        def check_alive(phase):
            for name in ("daemon_a", "daemon_b", "bus_a", "bus_b"):
                if not children[name].alive():
                    raise BenchError(f"{children[name].name} exited during {phase} "
                                     f"(status {children[name].proc.returncode})")

        log(f"run {index}: baseline ({args.baseline_method} x{args.n}, window {args.window})")
        result["baseline"] = phase_baseline(a, args, children)
        check_alive("the baseline")
        log(f"run {index}: throughput (Send x{args.n}, window {args.window})")
        result["throughput"] = phase_throughput(a, b, peer_b, args, children, f"T{index}:")
        check_alive("the throughput test")
        log(f"run {index}: latency (Send at {args.rate:g}/s for {args.duration:g} s)")
        result["latency"] = phase_latency(a, b, peer_b, args, f"L{index}:")
        check_alive("the latency test")
        result["state_dirs"] = {"a": state_a, "b": state_b}
    except BenchError as error:
        result["error"] = str(error)
        log(f"run {index}: FAILED: {error}")
    except GLib.Error as error:
        result["error"] = f"D-Bus: {error.message}"
        log(f"run {index}: FAILED: D-Bus: {error.message}")
    finally:
        close_clients(services, conns)
        exits = {}
        # Daemons first (they say goodbye over TCP and release their names), then the buses.
        for name in ("daemon_a", "daemon_b", "bus_a", "bus_b"):
            if name in children:
                exits[name] = children[name].stop()
        result["exit_status"] = exits
        result["loadavg_after"] = os.getloadavg()
        for name in ("daemon_a", "daemon_b"):
            if name in children:
                text = children[name].log_text()
                os.makedirs(logs_dir, exist_ok=True)
                copy = os.path.join(logs_dir, f"run{index}-peervoiced-{name[-1]}.log")
                with open(copy, "w") as f:
                    f.write(text)
                result.setdefault("logs", {})[name] = {"copy": os.path.relpath(copy), "lines": len(text.splitlines()),
                                                       "notable": interesting_log_lines(text)}
        for side in ("a", "b"):
            state = os.path.join(directory, f"{side}-state")
            if os.path.isdir(state):
                result.setdefault("disk", {})[side] = disk_usage(state)
    return result


# ---------------------------------------------------------------------------------------------
# Report


def log(message):
    print(f"bench: {message}", file=sys.stderr, flush=True)


def fmt(value, digits=0):
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def get(run, *keys):
    value = run
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


ROWS = [
    # label, key path, digits, target text, target check (median -> bool) or None
    ("baseline {method} calls/s (window {window})", ("baseline", "calls_per_s"), 0, "", None),
    ("baseline {method} round trip p50 ms @{rate}/s", ("baseline", "paced", "round_trip", "p50_ms"), 2, "", None),
    ("baseline {method} round trip p99 ms @{rate}/s", ("baseline", "paced", "round_trip", "p99_ms"), 2, "", None),
    ("Send replies/s (accepted by A)", ("throughput", "send_replies_per_s"), 0, "", None),
    ("messages/s end to end (Send -> MessageReceived)", ("throughput", "messages_per_s"), 0,
     f">= {TARGET_MSGS_PER_S:,.0f}", lambda v: v >= TARGET_MSGS_PER_S),
    ("  s to last MessageReceived / MessageDelivered", None, 2, "", None),
    ("  lost / duplicated / reordered", None, 0, "0 / 0 / 0", None),
    ("  MessageDelivered on A (of accepted)", None, 0, "all", None),
    ("  Send errors / MessageFailed", None, 0, "0 / 0", None),
    ("  CPU % A / B / bus A / bus B / client", None, 0, "", None),
    ("latency Send -> MessageReceived p50 ms @{rate}/s", ("latency", "send_to_received", "p50_ms"), 2, "", None),
    ("latency p90 ms", ("latency", "send_to_received", "p90_ms"), 2, "", None),
    ("latency p99 ms", ("latency", "send_to_received", "p99_ms"), 2,
     f"<= {TARGET_P99_MS:g}", lambda v: v <= TARGET_P99_MS),
    ("latency max ms", ("latency", "send_to_received", "max_ms"), 2, "", None),
    ("  Send -> reply p50 / p99 ms", None, 2, "", None),
    ("  Send -> MessageDelivered p50 / p99 ms", None, 2, "", None),
    ("  lost / duplicated / reordered / delivered", None, 0, "", None),
    ("state dir after the run, A / B (KiB)", None, 0, "", None),
]


def composite(label, run):
    t = run.get("throughput") or {}
    lat = run.get("latency") or {}
    cpu = t.get("cpu") or {}
    if label.startswith("  s to last"):
        return f"{fmt(t.get('seconds_to_last_received'), 2)} / {fmt(t.get('seconds_to_last_delivered'), 2)}"
    if label == "  lost / duplicated / reordered":
        return f"{fmt(t.get('lost'))} / {fmt(t.get('duplicated'))} / {fmt(t.get('reordered'))}"
    if label.startswith("  MessageDelivered on A"):
        return f"{fmt(t.get('delivered'))} / {fmt(t.get('accepted'))}"
    if label.startswith("  Send errors"):
        return f"{fmt(t.get('send_errors'))} / {fmt(t.get('failed'))}"
    if label.startswith("  CPU"):
        parts = [get(cpu, name, "cpu_pct") for name in ("daemon_a", "daemon_b", "bus_a", "bus_b", "client")]
        return "/".join(fmt(p) for p in parts)
    if label.startswith("  Send -> reply"):
        return f"{fmt(get(lat, 'send_to_reply', 'p50_ms'), 2)} / {fmt(get(lat, 'send_to_reply', 'p99_ms'), 2)}"
    if label.startswith("  Send -> MessageDelivered"):
        return (f"{fmt(get(lat, 'send_to_delivered', 'p50_ms'), 2)} / "
                f"{fmt(get(lat, 'send_to_delivered', 'p99_ms'), 2)}")
    if label.startswith("  lost / duplicated / reordered / delivered"):
        return (f"{fmt(lat.get('lost'))} / {fmt(lat.get('duplicated'))} / {fmt(lat.get('reordered'))} / "
                f"{fmt(lat.get('delivered'))}")
    if label.startswith("state dir"):
        disk = run.get("disk") or {}
        kib = [get(disk, side, "allocated_bytes") for side in ("a", "b")]
        return " / ".join(fmt(k / 1024 if k is not None else None) for k in kib)
    return "-"


def medians(runs):
    """The median of every numeric leaf over the runs that completed."""
    good = [r for r in runs if "error" not in r]

    def walk(path, sample):
        if isinstance(sample, dict):
            return {k: walk(path + (k,), v) for k, v in sample.items()
                    if k not in ("files", "first_send_errors", "first_errors", "failed_reasons", "notable")}
        if isinstance(sample, (int, float)) and not isinstance(sample, bool):
            return median_or_none([get(r, *path) for r in good])
        return None

    out = {}
    for key in ("baseline", "throughput", "latency", "disk"):
        samples = [r[key] for r in good if key in r]
        if samples:
            out[key] = walk((key,), samples[0])
    return out


def print_table(args, runs, med):
    names = [f"run {r['run']}" for r in runs] + ["median", "target"]
    fill = {"method": args.baseline_method, "window": args.window, "rate": f"{args.rate:g}"}
    labels = [row[0].format(**fill) for row in ROWS]
    rows = []
    for (label_fmt, path, digits, target, check), label in zip(ROWS, labels):
        cells = []
        for run in runs:
            if "error" in run and path is None and not run.get("throughput"):
                cells.append("failed")
            elif path is None:
                cells.append(composite(label_fmt, run))
            else:
                cells.append(fmt(get(run, *path), digits))
        if path is not None:
            m = get(med, *path)
            cells.append(fmt(m, digits))
            verdict = ""
            if check and m is not None:
                verdict = " (met)" if check(m) else " (MISSED)"
            cells.append(target + verdict)
        else:
            cells.append("")
            cells.append(target)
        rows.append((label, cells))
    width = max(len(label) for label in labels) + 1
    cols = [max(len(names[i]), *(len(cells[i]) for _, cells in rows)) + 3 for i in range(len(names))]
    print()
    print(f"PeerVoice text messages: {len(runs)} runs (fresh buses, daemons and state dirs per run), "
          f"N={args.n}, window {args.window} (one GDBus connection, pipelined async calls), "
          f"{args.text_bytes}-byte texts, latency at {args.rate:g}/s for {args.duration:g} s")
    print(" " * width + "".join(n.rjust(c) for n, c in zip(names, cols)))
    for label, cells in rows:
        print(label.ljust(width) + "".join(cell.rjust(c) for cell, c in zip(cells, cols)))
    for run in runs:
        if "error" in run:
            print(f"run {run['run']} failed: {run['error']}")
    client = median_or_none([get(r, "throughput", "cpu", "client", "cpu_pct") for r in runs])
    if client is not None and client >= 80:
        print(f"note: the benchmark client used {client:.0f}% of a CPU during the throughput test "
              f"({os.cpu_count()} CPUs here): the Send rate is partly client-bound")
    print()


def git_info():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "Sources", "Package.swift"],
                               capture_output=True, text=True, timeout=10).stdout.strip() != ""
        return {"commit": commit or None, "sources_modified": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "sources_modified": None}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, help="the peervoiced to run (release build)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("-n", "--n", type=int, default=5000, help="messages (and baseline calls) per throughput run")
    parser.add_argument("--window", type=int, default=64, help="calls in flight in the throughput test")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second in the latency test")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of the latency test")
    parser.add_argument("--baseline-method", default="ListPeers", choices=["ListPeers", "ToggleMute"])
    parser.add_argument("--baseline-duration", type=float, default=2.0,
                        help="seconds of paced baseline round trips at --rate")
    parser.add_argument("--text-bytes", type=int, default=100, help="length of each text (ASCII)")
    parser.add_argument("--idle-timeout", type=float, default=10.0,
                        help="stop waiting for outstanding messages after this many seconds without a signal")
    parser.add_argument("--output", default=os.path.join(here, "results", "messages.json"))
    parser.add_argument("--keep-temp", action="store_true", help="keep the temporary directory (buses, state, logs)")
    args = parser.parse_args()

    if not (os.path.isfile(args.bin) and os.access(args.bin, os.X_OK)):
        parser.error(f"--bin {args.bin}: not an executable file (build with `swift build -c release`)")
    if shutil.which("dbus-daemon") is None:
        parser.error("dbus-daemon is not installed (apt-get install dbus-daemon)")

    # Children inherit the signal mask: make sure SIGTERM/SIGINT are not blocked, and turn them
    # into an exception here so the finally blocks stop every child.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    results_dir = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(results_dir, exist_ok=True)
    logs_dir = os.path.join(results_dir, "logs")
    shutil.rmtree(logs_dir, ignore_errors=True)
    workdir = tempfile.mkdtemp(prefix="peervoice-bench-")
    runs = []
    try:
        for index in range(1, args.runs + 1):
            runs.append(one_run(index, args, workdir, logs_dir))
    except Terminated as stop:
        log(f"interrupted ({stop}); children stopped")
        return 130
    finally:
        if args.keep_temp:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    med = medians(runs)
    print_table(args, runs, med)
    report = {
        "benchmark": "peervoice-messages",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": {"kernel": platform.release(), "machine": platform.machine(), "cpus": os.cpu_count(),
                 "python": platform.python_version(), "glib": f"{GLib.MAJOR_VERSION}.{GLib.MINOR_VERSION}.{GLib.MICRO_VERSION}"},
        "git": git_info(),
        "binary": os.path.abspath(args.bin),
        "parameters": {"runs": args.runs, "n": args.n, "window": args.window, "rate": args.rate,
                       "duration_s": args.duration, "baseline_method": args.baseline_method,
                       "baseline_duration_s": args.baseline_duration, "text_bytes": args.text_bytes,
                       "client": "one GDBus connection per bus in one Python process; throughput: pipelined "
                                 "async Gio.DBusConnection.call with at most `window` in flight",
                       "daemons": "fresh dbus-daemons, peervoiced and state dirs per run; "
                                  "baseline, throughput and latency share them within a run",
                       "percentiles": "nearest rank"},
        "targets": {"messages_per_s_min": TARGET_MSGS_PER_S, "latency_p99_ms_max": TARGET_P99_MS},
        "median": med,
        "runs": runs,
    }
    with open(args.output, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(f"wrote {os.path.relpath(args.output)}; daemon logs in {os.path.relpath(logs_dir)}/")
    return 1 if any("error" in r for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
