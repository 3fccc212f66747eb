#!/usr/bin/env python3
"""What a benchmark ran on, so a figure from one machine is never read as another's
(docs/benchmarks.md, "The machine line"). scripts/bench.sh runs

  machine_info.py measure > FILE            before the benchmark: CPU model, cores, cache
                                            sizes, memcpy GB/s at 1 and 64 MiB, a loopback
                                            TCP echo's GB/s at 64 MiB (the dataplane
                                            benchmark's raw TCP when built), load average,
                                            commit
  BENCH | machine_info.py annotate FILE     passes the benchmark's JSON lines through and
                                            adds {"machine": FILE's object + load_after} to
                                            the last one (the summary)

Standard library and numpy only; the measurements take about a second.
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def lscpu():
    """Model, cores and cache sizes from lscpu (its English field names)."""
    out = {}
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, env=dict(
            os.environ, LC_ALL="C"), timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return out
    fields = {"Model name": "cpu_model", "L1d cache": "l1d", "L2 cache": "l2", "L3 cache": "l3"}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in fields:
            out[fields[key.strip()]] = value.strip()
    return out


def memcpy_gbps(mib, seconds=0.2):
    """numpy copy of MIB MiB between two buffers, best of the passes in `seconds`."""
    import numpy as np
    n = mib * 1024 * 1024
    a, b = np.ones(n, dtype=np.uint8), np.empty(n, dtype=np.uint8)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        np.copyto(b, a)
        best = max(best, n / (time.perf_counter() - t) / 1e9)
    return round(best, 2)


def tcp_echo_gbps(mib=64):
    """MIB MiB sent to a loopback echo (a thread) and read back, in GB/s of payload each way:
    a reference for the data-plane figures (Python's, so a floor of what the kernel moves)."""
    n = mib * 1024 * 1024
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def echo():
        conn, _ = srv.accept()
        buf = bytearray(1 << 20)
        view, left = memoryview(buf), n
        while left:
            got = conn.recv_into(view, min(len(buf), left))
            if not got:
                break
            conn.sendall(view[:got])
            left -= got
        conn.close()

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    cli = socket.create_connection(srv.getsockname())
    payload, back = bytes(n), bytearray(n)
    start = time.perf_counter()
    sender = threading.Thread(target=cli.sendall, args=(payload,), daemon=True)
    sender.start()
    view, got = memoryview(back), 0
    while got < n:
        r = cli.recv_into(view[got:], n - got)
        if not r:
            break
        got += r
    elapsed = time.perf_counter() - start
    sender.join()
    cli.close()
    srv.close()
    return round(n / elapsed / 1e9, 2)


def tcp_reference():
    """The TCP echo's GB/s at 64 MiB: the dataplane benchmark's raw TCP round trip (C++,
    the figure its ratios divide by) when built, else the Python echo above."""
    binary = os.path.join(os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")), "bench",
                          "groupsgd-bench-dataplane")
    if os.access(binary, os.X_OK):
        try:
            out = subprocess.run([binary, "--only", "tcp", "--sizes", "64", "--seconds", "0.3",
                                  "--no-latency"], capture_output=True, text=True, timeout=60).stdout
            for line in out.splitlines():
                row = json.loads(line)
                if row.get("what") == "tcp_round_trip":
                    return round(row["gbps"], 2), "groupsgd-bench-dataplane --only tcp"
        except (OSError, subprocess.SubprocessError, ValueError, KeyError):
            pass
    return tcp_echo_gbps(), "python echo"


def commit():
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("-dirty" if dirty else "")) or None


def measure():
    m = {"cores": os.cpu_count(), "load_before": round(os.getloadavg()[0], 2)}
    m.update(lscpu())
    try:
        m["memcpy_gbps_1mib"], m["memcpy_gbps_64mib"] = memcpy_gbps(1), memcpy_gbps(64)
    except ImportError:
        m["memcpy_gbps_1mib"] = m["memcpy_gbps_64mib"] = None
    m["tcp_echo_gbps"], m["tcp_echo_by"] = tcp_reference()
    m["commit"] = commit()
    m["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return m


def annotate(path):
    with open(path) as f:
        machine = json.load(f)
    held = None
    for line in sys.stdin:
        if held is not None:
            sys.stdout.write(held)
            sys.stdout.flush()
        held = line
    if held is None:
        return
    machine["load_after"] = round(os.getloadavg()[0], 2)
    try:
        last = json.loads(held)
    except ValueError:
        last = None
    if isinstance(last, dict):
        last["machine"] = machine
        held = json.dumps(last) + "\n"
    sys.stdout.write(held)


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "measure":
        print(json.dumps(measure()))
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "annotate":
        annotate(sys.argv[2])
        return 0
    sys.stderr.write("usage: machine_info.py measure | machine_info.py annotate FILE\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
