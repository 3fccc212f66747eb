#!/usr/bin/env python3
"""groupsgd-delay-proxy on loopback (no root needed): an echo through the proxy takes at
least twice the delay and at most a little more; 4 MiB come back byte-identical, in order;
a half-close is passed on; bad arguments are refused with a clear message (exit 2)."""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

PROXY = os.environ["GROUPSGD_DELAY_PROXY"]
DELAY_MS = 50


def echo_server(sock):
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        def serve(c):
            with c:
                while True:
                    data = c.recv(65536)
                    if not data:
                        c.shutdown(socket.SHUT_WR)  # pass the half-close back
                        return
                    c.sendall(data)
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def recv_exactly(s, n):
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise AssertionError(f"connection closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def main():
    bad = subprocess.run([PROXY, "--listen", "127.0.0.1:0", "--delay-ms", "-5", "--transparent"],
                         capture_output=True, text=True, timeout=10)
    assert bad.returncode == 2 and "--delay-ms wants 0..60000" in bad.stderr, bad
    bad = subprocess.run([PROXY, "--listen", "127.0.0.1:0", "--delay-ms", "5"],
                         capture_output=True, text=True, timeout=10)
    assert bad.returncode == 2 and "one of --target / --transparent" in bad.stderr, bad

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    threading.Thread(target=echo_server, args=(server,), daemon=True).start()
    target_port = server.getsockname()[1]
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    proxy_port = probe.getsockname()[1]
    probe.close()
    with tempfile.TemporaryDirectory() as tmp:
        ready = os.path.join(tmp, "ready")
        proxy = subprocess.Popen([PROXY, "--listen", f"127.0.0.1:{proxy_port}", "--delay-ms", str(DELAY_MS),
                                  "--target", f"127.0.0.1:{target_port}", "--ready-file", ready])
        try:
            deadline = time.monotonic() + 10
            while not os.path.exists(ready):
                assert time.monotonic() < deadline, "the proxy did not start"
                time.sleep(0.02)
            c = socket.create_connection(("127.0.0.1", proxy_port), timeout=10)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            rtts = []
            for i in range(5):
                t0 = time.monotonic()
                c.sendall(b"ping %d" % i)
                assert recv_exactly(c, len(b"ping %d" % i)) == b"ping %d" % i
                rtts.append((time.monotonic() - t0) * 1000)
            assert min(rtts) >= 2 * DELAY_MS - 1, rtts
            assert min(rtts) < 2 * DELAY_MS + 500, rtts  # slack for a loaded machine
            payload = os.urandom(4 << 20)
            sender = threading.Thread(target=c.sendall, args=(payload,))
            sender.start()
            echoed = recv_exactly(c, len(payload))
            sender.join()
            assert echoed == payload, "bytes changed or reordered"
            c.shutdown(socket.SHUT_WR)
            assert c.recv(1) == b"", "the half-close did not come back"
            c.close()
            print(f"delay proxy: {DELAY_MS} ms each way; echo rtt min {min(rtts):.1f} ms "
                  f"max {max(rtts):.1f} ms; 4 MiB echoed intact; half-close passed on")
        finally:
            proxy.terminate()
            assert proxy.wait(timeout=10) == 0, "the proxy did not exit 0 on SIGTERM"
    return 0


if __name__ == "__main__":
    sys.exit(main())
