#!/usr/bin/python3
"""make bench-connect: what the dial proof (issue 35) costs a paired peer, and what a prober sees.

Each run starts fresh: two private session buses, a peervoiced on each; A connects to B by address
(both confirm), B restarts on its default LAN listener (no Avahi, no system bus: it is not
discoverable and answers only its paired peers' proven dials), B dials A once (so A knows B's new
route), then N times: A.Disconnect(B), and A.Connect(B's id) timed from the call
to its reply (the link is open: key exchange and PAIRING known/known). Runs alternate between the
baseline binary (--baseline-bin: before the change) and this one (--bin). With --probes K, each run
of this binary also sends K probes of each kind (tests/prober/pvprobe.py) to B and records when
B closed them after the prober's last bytes.

Prints a table (per-run medians, then the median of the runs) and writes bench/results/connect.json.
Debian's /usr/bin/python3 (python3-gi, python3-cryptography).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import messages as m  # noqa: E402  (the daemons, buses and clients of bench-messages)
from gi.repository import GLib  # noqa: E402

PROBER = os.path.join(HERE, "..", "tests", "prober", "pvprobe.py")


def start_b(binary, directory, address_b, conn_b, children, listen):
    """B on its bus; `listen`: on a loopback port of its own, else on its default LAN listener."""
    state_b = os.path.join(directory, "b-state")
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address_b)
    argv = [binary, "--state-dir", state_b, "--name", "bench-b"] + (["--listen", "127.0.0.1:0"] if listen else [])
    children["daemon_b"] = m.Child("peervoiced b", argv, os.path.join(directory, "peervoiced-b.log"), env=env)
    if not m.run_until(lambda: m.name_owner(conn_b) is not None, 15):
        raise m.BenchError("peervoiced b did not start: " + children["daemon_b"].log_text()[:400])
    return m.Service(conn_b, m.name_owner(conn_b)), state_b


def start_pair(binary, directory, children, conns, services):
    """A and B paired, B then restarted on its default listener with nobody discoverable (no
    Avahi: there is no system bus), and A knowing that route (B dialled A once)."""
    bus_a, address_a = m.start_bus(directory, "bus-a")
    children["bus_a"] = bus_a
    bus_b, address_b = m.start_bus(directory, "bus-b")
    children["bus_b"] = bus_b
    conn_a, conn_b = m.connect_bus(address_a), m.connect_bus(address_b)
    conns += [conn_a, conn_b]
    os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=" + os.path.join(directory, "no-system-bus")
    _, owner_a, _ = m.start_daemon(binary, directory, "a", address_a, conn_a, children)
    a = m.Service(conn_a, owner_a)
    b, _ = start_b(binary, directory, address_b, conn_b, children, listen=True)
    services += [a, b]
    for service in (a, b):
        service.on("PairingRequested", lambda _t, xs, service=service: service.call_async(
            "ConfirmPairing", GLib.Variant("(sb)", (xs[0], True)), None, lambda *_: None))
    call(a, "Connect", "ip:" + b.get_property("ListenAddress"))
    a.on("PairingRequested", None)
    id_a, id_b = a.get_property("Id"), b.get_property("Id")
    b.close()
    services.remove(b)
    children.pop("daemon_b").stop()
    b, state_b = start_b(binary, directory, address_b, conn_b, children, listen=False)
    services.append(b)
    call(b, "Connect", id_a)
    return a, b, id_b, state_b


def call(service, method, args):
    done = {}
    service.call_async(method, GLib.Variant("(s)", (args,)) if args is not None else None, None,
                       lambda reply, error, t: done.update(reply=reply, error=error, t=t))
    m.run_until(lambda: "t" in done, 30)
    if done.get("error") is not None or "t" not in done:
        raise m.BenchError(f"{method}: {done.get('error', 'no reply within 30 s')}")
    return done["reply"], done["t"]


def one_run(index, binary, label, args, workdir):
    directory = os.path.join(workdir, f"run{index}-{label}")
    os.makedirs(directory)
    children, conns, services = {}, [], []
    result = {"run": index, "binary": label, "loadavg_before": os.getloadavg()}
    try:
        a, b, id_b, state_b = start_pair(binary, directory, children, conns, services)
        port = b.get_property("ListenAddress").rsplit(":", 1)[1]
        state = {}
        a.on("PeerStateChanged", lambda _t, xs: state.update({xs[0]: xs[1]}))
        times = []
        for _ in range(args.connects):
            call(a, "Disconnect", id_b)
            m.run_until(lambda: state.get(id_b) == "disconnected", 10)
            m.run_until(lambda: False, 0.05)
            started = m.now()
            _, replied = call(a, "Connect", id_b)
            times.append((replied - started) * 1000)
        result["connect_ms"] = times
        result["connect_median_ms"] = statistics.median(times)
        if args.probes and label == "this":
            with open(os.path.join(state_b, "presence.key")) as f:
                secret = f.read().strip()
            kinds = {"stranger": [], "two epochs old": ["--secret", secret, "--epoch-offset", "-2"],
                     "version 6": ["--version", "6"], "not PeerVoice": ["--raw", "474554202f0d0a0d0a"]}
            probes = {}
            for kind, options in kinds.items():
                closes = []
                for _ in range(args.probes):
                    out = subprocess.run(["/usr/bin/python3", PROBER, "127.0.0.1", port] + options,
                                         capture_output=True, text=True, timeout=30).stdout
                    report = json.loads(out)
                    if report["answered"] or report["ending"] != "closed":
                        raise m.BenchError(f"probe {kind} was answered: {report}")
                    closes.append(report["closed_after_ms"])
                probes[kind] = closes
            result["probes_closed_after_ms"] = probes
    except (m.BenchError, GLib.Error) as error:
        result["error"] = str(error)
        m.log(f"run {index} ({label}): FAILED: {error}")
    finally:
        m.close_clients(services, conns)
        for name in ("daemon_a", "daemon_b", "bus_a", "bus_b"):
            if name in children:
                children[name].stop()
    return result


def main():
    parser = argparse.ArgumentParser(description="the paired set-up time with and without the dial proof")
    parser.add_argument("--bin", required=True)
    parser.add_argument("--baseline-bin", required=True)
    parser.add_argument("--runs", type=int, default=5, help="fresh starts of each binary (alternating)")
    parser.add_argument("--connects", type=int, default=30, help="timed connects per run")
    parser.add_argument("--probes", type=int, default=10, help="probes of each kind per run of this binary")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-connect-") as workdir:
        for index in range(args.runs):
            for label, binary in (("baseline", args.baseline_bin), ("this", args.bin)):
                m.log(f"run {index} ({label})")
                runs.append(one_run(index, binary, label, args, workdir))
    table = {label: [r["connect_median_ms"] for r in runs if r["binary"] == label and "connect_median_ms" in r]
             for label in ("baseline", "this")}
    print(f"Connect to a paired peer that is not discoverable, loopback ({args.connects} per run; ms, per-run medians):")
    for label, values in table.items():
        print(f"  {label:8} " + "  ".join(f"{v:6.2f}" for v in values) + (f"   median {statistics.median(values):.2f}" if values else ""))
    if table["baseline"] and table["this"]:
        print(f"  difference of the medians: {statistics.median(table['this']) - statistics.median(table['baseline']):+.2f} ms")
    probes = {}
    for r in runs:
        for kind, values in r.get("probes_closed_after_ms", {}).items():
            probes.setdefault(kind, []).extend(values)
    if probes:
        print("A prober's dial, closed after its last bytes (ms: min / median / max over all runs):")
        for kind, values in probes.items():
            print(f"  {kind:16} {min(values):7.1f} {statistics.median(values):7.1f} {max(values):7.1f}  ({len(values)} probes)")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "connect.json"), "w") as f:
        json.dump({"args": vars(args), "runs": runs}, f, indent=1)
    return 1 if any("error" in r for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
