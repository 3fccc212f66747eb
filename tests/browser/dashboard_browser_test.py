#!/usr/bin/env python3
"""The dashboard page in headless Chromium (docs/operations.md "Watching a run").

1. A short adaptive run on loopback: groupsgdd with --metrics-listen, four trainers of
   which one is four times slower (a straggler), and the evaluator.
2. Once the daemon's /api/state shows the straggler flagged and a batch resize or regroup,
   Chromium loads the page (--dump-dom after a few polls of virtual time) and the DOM is
   checked: one row per worker with data-worker="NAME", the straggler flagged with the
   detector's reason, the evaluator's "-" where a field does not apply, a chart drawn with
   data, the regroup / batch-resize event listed, and the page says it is live. A
   screenshot goes to $GROUPSGD_TEST_OUTPUT_DIR (default: a temporary directory).
3. The daemon is stopped. The page's own bytes (as the daemon served them) are served by a
   stand-in that answers api/state once with the daemon's last state and then drops every
   connection, as a dead daemon's port does: the page must show "disconnected" with the
   last figures kept, never a blank page. A second screenshot shows it.
4. A multi-job daemon (--serve) with its device arbiter: two jobs whose workers take turns on
   one shared device. The page must list both jobs with their progress, and the device with
   its holder, queue and leases, and each job's lease waits. A third screenshot shows it.

Exit 77 (CTest: skipped) with the reason when chromium is not installed.
"""
import html.parser
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SKIP = 77
TRAINERS = 4


def log(msg):
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr, flush=True)
    sys.exit(1)


T0 = time.monotonic()


def find_chromium():
    for name in (os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


# ---- a small DOM from Chromium's --dump-dom output ---------------------------------------

VOID = {"meta", "link", "br", "img", "input", "hr", "col", "source", "wbr", "area", "base"}


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, dict(attrs), parent, [], ""

    def all_text(self):
        return self.text + "".join(c.all_text() for c in self.children)

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def find(self, pred):
        return [n for n in self.walk() if pred(n)]


class DomBuilder(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        # Text after a child element belongs to this node too (for all_text()).
        self.cur.text += data


def parse_dom(text):
    b = DomBuilder()
    b.feed(text)
    return b.root


def chromium(browser, url, *extra, budget_ms=4000):
    # Virtual time: the page's timers (its 500 ms polls) run without waiting for real time,
    # while network fetches pause it; the DOM is dumped once the budget is spent.
    cmd = [browser, "--headless=new", "--disable-gpu", "--no-sandbox", "--no-first-run",
           "--disable-extensions", "--hide-scrollbars", "--window-size=1280,1700",
           f"--virtual-time-budget={budget_ms}", *extra, url]
    with tempfile.TemporaryDirectory(prefix="gsgd-chromium-") as profile:
        cmd.insert(1, f"--user-data-dir={profile}")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    if r.returncode != 0:
        fail(f"chromium exited {r.returncode}: {r.stderr[-2000:]}")
    if "--dump-dom" in extra and "<body" not in r.stdout:
        fail(f"chromium dumped no DOM: {r.stderr[-3000:]}")
    return r.stdout


def check_png(path):
    with open(path, "rb") as f:
        head = f.read(8)
    if head != b"\x89PNG\r\n\x1a\n" or os.path.getsize(path) < 10000:
        fail(f"{path} is not a plausible screenshot ({os.path.getsize(path)} bytes)")


# ---- the run --------------------------------------------------------------------------------

def start_run(work, port):
    daemon_bin = os.environ["GROUPSGDD"]
    worker_bin = os.environ["GROUPSGD_WORKER"]
    endpoint_file = os.path.join(work, "endpoint")
    procs = []
    daemon = subprocess.Popen(
        [daemon_bin, "--mode", "adaptive", "--workers", str(TRAINERS), "--batch-size", "32",
         "--listen", "tcp://127.0.0.1:0", "--endpoint-file", endpoint_file,
         "--max-seconds", "120", "--heartbeat-ms", "250", "--control-ms", "500",
         "--metrics-listen", f"127.0.0.1:{port}", "--log-level", "warn"],
        stdout=open(os.path.join(work, "daemon.out"), "w"),
        stderr=open(os.path.join(work, "daemon.log"), "w"))
    procs.append(daemon)
    deadline = time.monotonic() + 15
    while not (os.path.exists(endpoint_file) and os.path.getsize(endpoint_file) > 0):
        if daemon.poll() is not None or time.monotonic() > deadline:
            fail("the daemon did not start: " + open(os.path.join(work, "daemon.log")).read())
        time.sleep(0.05)
    endpoint = open(endpoint_file).read().strip()
    for i in range(1, TRAINERS + 1):
        slowdown = "4" if i == 1 else "1"  # w1 is the straggler
        procs.append(subprocess.Popen(
            [worker_bin, "--coordinator", endpoint, "--device-ms", "10", "--slowdown", slowdown,
             "--name", f"w{i}", "--log-level", "warn"],
            stderr=open(os.path.join(work, f"w{i}.log"), "w")))
    procs.append(subprocess.Popen(
        [worker_bin, "--coordinator", endpoint, "--evaluate", "--name", "evaluator",
         "--log-level", "warn"], stderr=open(os.path.join(work, "evaluator.log"), "w")))
    return daemon, procs


def resize_or_regroup(job):
    return [e for e in job["events"]
            if e["kind"] == "regroup" or (e["kind"] == "straggler" and "batch" in e["text"])]


def wait_for_story(base):
    """The daemon's state once it has flagged w1, a resize or regroup and curves."""
    deadline = time.monotonic() + 60
    last = None
    while time.monotonic() < deadline:
        try:
            state = json.loads(http_get(base + "/api/state"))
            job = state["jobs"].get("default")
            if job:
                last = job
                flagged = [w for w in job["workers"] if w["name"] == "w1" and
                           w["straggler"] and w["straggler"]["state"] == "flagged"]
                points = [a for a in job["history"]["test_acc"] if a is not None]
                if flagged and resize_or_regroup(job) and len(points) >= 3:
                    return state
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    fail("the run never showed a flagged straggler, a resize/regroup and 3 accuracy points; "
         "last view: " + json.dumps(last)[:3000])


def check_live_page(dom, state):
    job = state["jobs"]["default"]
    rows = dom.find(lambda n: n.tag == "tr" and "data-worker" in n.attrs)
    names = sorted(r.attrs["data-worker"] for r in rows)
    expected = sorted(w["name"] for w in job["workers"])
    if names != expected or len(set(names)) != len(names):
        fail(f"worker rows {names}, the daemon lists {expected}")
    for i in range(1, TRAINERS + 1):
        if f"w{i}" not in names:
            fail(f"no row for trainer w{i}")
    # The detector may call w1 recovered for a while once its batch shrank (and flag it
    # again), and a loaded machine may flag another trainer for a moment: the page must
    # show a flagged straggler with the detector's text, w1 with its straggler state, and
    # not everybody flagged.
    flagged = [r for r in rows if r.attrs.get("data-straggler") == "flagged"]
    if not flagged or len(flagged) >= TRAINERS:
        fail(f"flagged rows {[r.attrs['data-worker'] for r in flagged]}: expected the straggler")
    for r in flagged:
        text = r.all_text()
        if "flagged" not in text or "is a straggler" not in text:
            fail(f"{r.attrs['data-worker']}'s row lacks the detector's reason: {text!r}")
    w1 = [r for r in rows if r.attrs["data-worker"] == "w1"][0]
    if w1.attrs.get("data-straggler") not in ("flagged", "recovered") or "(w1)" not in w1.all_text():
        fail(f"the straggler w1's row shows no straggler state: {w1.all_text()!r}")
    evaluator = [r for r in rows if r.attrs.get("data-role") == "evaluator"]
    if len(evaluator) != 1:
        fail("no evaluator row")
    cells = [c.all_text().strip() for c in evaluator[0].children if c.tag == "td"]
    if cells[3:7] != ["-", "-", "-", "-"]:  # group, batch, step ms, speed
        fail(f"the evaluator's row shows fields it does not have: {cells}")
    paths = dom.find(lambda n: n.tag == "path" and "series" in n.attrs.get("class", ""))
    drawn = [p for p in paths if int(p.attrs.get("data-points", "0")) >= 2 and
             p.attrs.get("d", "").count("L") >= 1]
    if not drawn:
        fail(f"no chart drawn with data ({len(paths)} series paths, none with 2+ points)")
    timeline = dom.find(lambda n: n.tag == "rect" and "data-group" in n.attrs)
    if not timeline:
        fail("the groups timeline has no membership stretch")
    events = dom.find(lambda n: n.tag == "li" and "data-kind" in n.attrs)
    listed = [e.all_text() for e in events
              if e.attrs["data-kind"] == "regroup" or
              (e.attrs["data-kind"] == "straggler" and "batch" in e.all_text())]
    if not listed:
        fail("no regroup or batch-resize event listed: " +
             repr([e.all_text() for e in events][:10]))
    body = dom.find(lambda n: n.tag == "body")[0]
    if body.attrs.get("data-connection") != "live":
        fail(f"the page is not live: data-connection={body.attrs.get('data-connection')}")
    log(f"live page: {len(rows)} worker rows, w1 flagged, {len(drawn)} series drawn, "
        f"{len(timeline)} timeline stretches, event: {listed[0][:100]!r}")


class StandIn(http.server.BaseHTTPRequestHandler):
    """Serves the page's files; api/state once (the daemon's last answer), then hangs up."""
    files = {}
    state = b""
    answered = 0

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/api/state":
            if StandIn.answered == 0:
                StandIn.answered += 1
                return self.reply(200, "application/json", StandIn.state)
            self.close_connection = True  # the daemon is gone: no answer at all
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if path in StandIn.files:
            kind, body = StandIn.files[path]
            return self.reply(200, kind, body)
        self.reply(404, "text/plain", b"not found")

    def reply(self, code, kind, body):
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def check_disconnected_page(dom):
    body = dom.find(lambda n: n.tag == "body")[0]
    if body.attrs.get("data-connection") != "disconnected":
        fail(f"data-connection={body.attrs.get('data-connection')}, expected disconnected")
    banner = dom.find(lambda n: n.attrs.get("id") == "disconnected")
    if not banner or "hidden" in banner[0].attrs:
        fail("the disconnected banner is not shown")
    text = banner[0].all_text()
    if "Disconnected" not in text or "does not answer" not in text:
        fail(f"the banner does not say what happened: {text!r}")
    rows = dom.find(lambda n: n.tag == "tr" and "data-worker" in n.attrs)
    if len(rows) < TRAINERS:
        fail(f"the last figures were not kept: {len(rows)} worker rows")
    log(f"disconnected page: banner {text.strip()[:120]!r}, {len(rows)} rows kept")


# ---- a multi-job daemon ----------------------------------------------------------------------

SERVE_JOBS = ("left", "right")


def start_serve(work, port):
    """groupsgdd --serve with its arbiter, two softmax jobs, two workers each on device dev0."""
    daemon_bin, worker_bin = os.environ["GROUPSGDD"], os.environ["GROUPSGD_WORKER"]
    ctl_bin = os.environ["GROUPSGDCTL"]
    sock, endpoint_file = os.path.join(work, "ctl.sock"), os.path.join(work, "endpoint")
    arbiter = f"tcp://127.0.0.1:{free_port()}"
    procs = [subprocess.Popen(
        [daemon_bin, "--serve", "--state-dir", os.path.join(work, "state"), "--control-socket",
         sock, "--listen", "tcp://127.0.0.1:0", "--endpoint-file", endpoint_file,
         "--max-group-slots", "4", "--heartbeat-ms", "250", "--metrics-listen",
         f"127.0.0.1:{port}", "--arbiter-listen", arbiter, "--arbiter-policy", "crossover",
         "--log-level", "warn"], stdout=open(os.path.join(work, "serve.out"), "w"),
        stderr=open(os.path.join(work, "serve.log"), "w"))]
    deadline = time.monotonic() + 15
    while not (os.path.exists(endpoint_file) and os.path.getsize(endpoint_file) > 0):
        if procs[0].poll() is not None or time.monotonic() > deadline:
            fail("the --serve daemon did not start: " + open(os.path.join(work, "serve.log")).read())
        time.sleep(0.05)
    endpoint = open(endpoint_file).read().strip()
    for job in SERVE_JOBS:
        path = os.path.join(work, job + ".json")
        with open(path, "w") as f:
            json.dump({"name": job, "mode": "sync", "workers": 2, "model": "softmax",
                       "batch_size": 64, "optimizer": {"lr": 0.1}, "max_seconds": 120}, f)
        r = subprocess.run([ctl_bin, "--socket", sock, "job", "submit", path],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            fail(f"job submit {job}: {r.stdout} {r.stderr}")
        for i in (1, 2):
            procs.append(subprocess.Popen(
                [worker_bin, "--coordinator", endpoint, "--job", job, "--name", f"{job}{i}",
                 "--device-ms", "10", "--shared-device", "dev0", "--arbiter", arbiter,
                 "--device-lock-dir", os.path.join(work, "locks"), "--log-level", "warn"],
                stderr=open(os.path.join(work, f"{job}{i}.log"), "w")))
    return procs


def wait_for_shared_device(base):
    deadline = time.monotonic() + 60
    last = None
    while time.monotonic() < deadline:
        try:
            last = json.loads(http_get(base + "/api/state"))
            arbiter = (last.get("job_table") or {}).get("arbiter") or {}
            leased = {j["job"] for j in arbiter.get("jobs", []) if j["grants"] >= 10}
            if leased == set(SERVE_JOBS) and set(SERVE_JOBS) <= set(last["jobs"]):
                return last
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    fail("the two jobs never both held the shared device 10 times; last state: " +
         json.dumps(last)[:3000])


def check_serve_page(dom):
    jobs = {r.attrs["data-job"]: r for r in dom.find(lambda n: n.tag == "tr" and "data-job" in n.attrs)}
    if sorted(jobs) != sorted(SERVE_JOBS):
        fail(f"job rows {sorted(jobs)}, expected {list(SERVE_JOBS)}")
    for name, row in jobs.items():
        cells = [c.all_text().strip() for c in row.children if c.tag == "td"]
        if row.attrs.get("data-state") != "running" or "samples" not in cells[2]:
            fail(f"job {name}'s row shows no running progress: {cells}")
    section = dom.find(lambda n: n.attrs.get("id") == "devices-section")
    if not section or "hidden" in section[0].attrs:
        fail("the shared-devices section is hidden")
    devices = dom.find(lambda n: n.tag == "tr" and n.attrs.get("data-device") == "dev0")
    if len(devices) != 1:
        fail("no row for the shared device dev0")
    cells = [c.all_text().strip() for c in devices[0].children if c.tag == "td"]
    holders = devices[0].attrs.get("data-holders", "")
    if any(h and h not in SERVE_JOBS for h in holders.split(",")) or int(cells[3]) < 10:
        fail(f"dev0's row: holders {holders!r}, cells {cells}")
    lease_jobs = {r.attrs["data-lease-job"]: [c.all_text().strip() for c in r.children if c.tag == "td"]
                  for r in dom.find(lambda n: n.tag == "tr" and "data-lease-job" in n.attrs)}
    if sorted(lease_jobs) != sorted(SERVE_JOBS):
        fail(f"lease rows {lease_jobs}, expected one per job")
    log(f"serve page: jobs {sorted(jobs)}, dev0 {cells}, lease waits {lease_jobs}")


def serve_part(browser, out_dir):
    work = tempfile.mkdtemp(prefix="gsgd-browser-serve-")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    procs = start_serve(work, port)
    try:
        wait_for_shared_device(base)
        dom_text = chromium(browser, base + "/", "--dump-dom")
        with open(os.path.join(out_dir, "dashboard-serve.html"), "w") as f:
            f.write(dom_text)
        check_serve_page(parse_dom(dom_text))
        shot = os.path.join(out_dir, "dashboard-serve.png")
        chromium(browser, base + "/", f"--screenshot={shot}")
        check_png(shot)
    finally:
        for p in procs[1:] + procs[:1]:  # the workers first, then the daemon
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    shutil.rmtree(work, ignore_errors=True)


def main():
    browser = find_chromium()
    if browser is None:
        print("SKIP: chromium is not installed (scripts/install-deps.sh installs it)")
        return SKIP
    for var in ("GROUPSGDD", "GROUPSGD_WORKER", "GROUPSGDCTL"):
        if not os.environ.get(var):
            fail(f"set {var}")
    out_dir = os.environ.get("GROUPSGD_TEST_OUTPUT_DIR") or tempfile.mkdtemp(prefix="gsgd-browser-")
    os.makedirs(out_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="gsgd-browser-run-")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    daemon, procs = start_run(work, port)
    try:
        log(f"daemon on {base}, logs in {work}")
        state = wait_for_story(base)
        log("the run shows a flagged straggler and a resize/regroup; loading the page")
        # The page's own bytes, for the stand-in of step 3.
        for path, kind in (("/", "text/html"), ("/dashboard.js", "text/javascript"),
                           ("/dashboard.css", "text/css")):
            StandIn.files[path] = (kind, http_get(base + path))
        for attempt in range(3):  # again while no straggler is flagged at this moment
            t = time.monotonic()
            dom_text = chromium(browser, base + "/", "--dump-dom")
            log(f"chromium: DOM dumped in {time.monotonic() - t:.2f} s")
            if 'data-straggler="flagged"' in dom_text:
                break
            time.sleep(2)
        with open(os.path.join(out_dir, "dashboard-live.html"), "w") as f:
            f.write(dom_text)
        state = json.loads(http_get(base + "/api/state"))  # the workers as the page saw them
        check_live_page(parse_dom(dom_text), state)
        shot = os.path.join(out_dir, "dashboard.png")
        chromium(browser, base + "/", f"--screenshot={shot}")
        check_png(shot)
        log(f"screenshot: {shot}")
        StandIn.state = http_get(base + "/api/state")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    # The daemon is gone: its port refuses, and the page must say so.
    try:
        http_get(base + "/api/state", timeout=1)
        fail("the daemon still answers after it was stopped")
    except OSError:
        pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        dom_text = chromium(browser, url, "--dump-dom")
        with open(os.path.join(out_dir, "dashboard-disconnected.html"), "w") as f:
            f.write(dom_text)
        check_disconnected_page(parse_dom(dom_text))
        shot = os.path.join(out_dir, "dashboard-disconnected.png")
        StandIn.answered = 0
        chromium(browser, url, f"--screenshot={shot}")
        check_png(shot)
        # Opened after the daemon went: nothing to keep, but still no blank page.
        dom = parse_dom(chromium(browser, url, "--dump-dom"))
        body = dom.find(lambda n: n.tag == "body")[0]
        text = dom.find(lambda n: n.attrs.get("id") == "disconnected-text")[0].all_text()
        headers = dom.find(lambda n: n.tag == "th")
        if body.attrs.get("data-connection") != "disconnected" or "Nothing was received" not in text:
            fail(f"a page opened with the daemon gone says {text!r}")
        if len(headers) < 10:
            fail("a page opened with the daemon gone is blank")
        log(f"page opened with the daemon gone: {text.strip()[:100]!r}")
    finally:
        server.shutdown()
    shutil.rmtree(work, ignore_errors=True)
    serve_part(browser, out_dir)
    log(f"PASS (screenshots in {out_dir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
