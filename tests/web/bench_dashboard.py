#!/usr/bin/python3
"""bench_dashboard.py: how fast the execution page is (not a test).

  /usr/bin/python3 tests/web/bench_dashboard.py --canopy BIN [--runs 5] [--rates 200,1000]

A. render: a settled execution of 1,000 steps (20 layers of 50, two needs
   each); the page is loaded afresh --runs times and the browser measures,
   from navigation start (performance.now()), when the tree arrived, when
   the DAG was drawn (mark `canopy:dag-drawn`, after the frame that shows
   it), and when the replayed event log (~3,000 events) was applied.
B. live DAG: 1,000 independent `fn sleep` steps released at once, ending
   at 200 per second (5 s); every event restyles one node.
C. output: step.output lines at each rate of --rates (events/s, from four
   subprocesses for 10 s, or 4 s at 1,000/s: a step reports at most 1,000
   lines).
For B and C the page measures, per batch of events, the delay from the
moment a chunk of the stream was read to the moment its events were in the
DOM (lag), and from the event's server time to that moment (end to end,
same clock). The page must show every event of the API's log.
"""

import re
import shutil
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from harness import Browser, Relay, Server, parse_args


def no_brotli(data):
    """Drops br (and zstd) from Accept-Encoding: the server then answers gzip."""
    return re.sub(rb"(?im)^(accept-encoding:[^\r\n]*)", lambda m: re.sub(rb",?\s*(br|zstd)\b", b"", m.group(1)), data)

N_LAYERS, WIDTH = 20, 50


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def layered_graph():
    steps = {}
    for layer in range(N_LAYERS):
        for i in range(WIDTH):
            needs = [] if layer == 0 else sorted({f"s{layer - 1}_{i}", f"s{layer - 1}_{(i * 7 + 3) % WIDTH}"})
            steps[f"s{layer}_{i}"] = {"fn": "noop", "needs": needs}
    return {"name": "big", "steps": steps}


def gate(go):
    return {"run": ["sh", "-c", 'while [ ! -e "$GO" ]; do sleep 0.02; done'], "env": {"GO": str(go)}}


def live_dag_graph(go, n=1000, per_s=200):
    steps = {"gate": gate(go)}
    for i in range(n - 1):
        steps[f"t{i:04d}"] = {"fn": "sleep", "with": {"ms": int(1000 * (i + 1) / per_s)}, "needs": ["gate"]}
    return {"name": "live-dag", "steps": steps}


def output_graph(go, rate, seconds=10, procs=4):
    # a step reports at most 1,000 output lines and a node runs 4 subprocesses at once
    seconds = min(seconds, 4000 / rate)
    per = rate / procs
    code = ("import time\nt0 = time.monotonic()\n"
            f"for i in range({int(per * seconds)}):\n"
            f"    d = t0 + i / {per} - time.monotonic()\n"
            "    d > 0 and time.sleep(d)\n"
            "    print('line', i, flush=True)\n")
    steps = {"gate": gate(go)}
    for p in range(procs):
        steps[f"out{p}"] = {"run": ["python3", "-c", code], "needs": ["gate"]}
    return {"name": f"output-{rate}", "steps": steps}


def stats(b):
    return b.js("return window.__canopyStats")


def open_execution(b, xid):
    b.driver.get("about:blank")  # a real page load each time, not a hash change
    b.driver.get(f"{b.base_url}/ui/#/executions/{xid}")
    b.wait(lambda: (stats(b) or {}).get("dagDrawnAt"), 30, "the DAG drawn")


def bench_render(s, b, runs):
    s.register(layered_graph())
    xid = s.start_execution("big")["id"]
    s.wait_status(xid, "completed", timeout=60)
    n_events = len(s.events(xid))
    rows = []
    for _ in range(runs):
        open_execution(b, xid)
        b.wait(lambda: stats(b)["applied"] >= n_events and stats(b)["caughtUpAt"], 30, "the replay applied")
        st = stats(b)
        nodes = b.js("return document.querySelectorAll('[data-testid=step-node]').length")
        assert nodes == 1000, f"{nodes} step nodes drawn"
        rows.append((st["treeLoadedAt"], st["dagDrawnAt"], st["caughtUpAt"]))
    return xid, n_events, rows


def bench_live(s, b, graph, label, tmp):
    go = tmp / ("go-" + "".join(c if c.isalnum() else "_" for c in label))
    s.register(graph(go))
    xid = s.start_execution(graph(go)["name"])["id"]
    open_execution(b, xid)
    drawn = stats(b)["dagDrawnAt"]
    b.wait(lambda: b.q("stream-state", state="live") and stats(b)["caughtUpAt"], 10, "the stream live")
    b.js("Object.assign(window.__canopyStats, {lags: [], e2e: [], maxLag: 0})")
    go.write_text("go")
    s.wait_status(xid, "completed", timeout=120)
    log = s.events(xid)
    api = len(log)
    b.wait(lambda: stats(b)["applied"] >= api, 30, "the page to apply every event")
    st = stats(b)
    released = next(e["time"] for e in log if e.get("step") == "gate" and e["type"] == "step.completed")
    live = [datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp() for e in log if e["time"] >= released]
    return {"label": label, "events": len(live), "rate": len(live) / max(live[-1] - live[0], 1e-3),
            "all_shown": st["applied"] == api,
            "lags": st["lags"], "e2e": st["e2e"], "batches": len(st["lags"]), "drawn": drawn}


def main():
    args = parse_args(extra=lambda p: (p.add_argument("--runs", type=int, default=5),
                                       p.add_argument("--rates", default="200,1000"),
                                       p.add_argument("--no-brotli", action="store_true",
                                                      help="strip br from the browser's Accept-Encoding (through a relay)")))
    tmp = Path(tempfile.mkdtemp(prefix="canopy-web-bench-"))
    s = Server(args.canopy, tmp / "server", web_dir=None if args.embedded else Path(__file__).resolve().parents[2] / "runtime" / "web")
    b = None
    try:
        s.start()
        relay = Relay(s.port, rewrite=no_brotli) if args.no_brotli else None
        b = Browser(relay.url if relay else s.url, args.out or tmp / "out")
        b.login("ta")
        b.one("exec-table")
        xid, n_events, rows = bench_render(s, b, args.runs)
        print(f"\nA. render of a settled 1,000-step execution ({n_events} events in its log), {args.runs} page loads, "
              f"ms from navigation start{' (answers gzip, not br)' if args.no_brotli else ''}:")
        print(f"   {'':14}{'median':>8}{'max':>8}")
        for i, name in enumerate(("tree loaded", "DAG drawn", "log replayed")):
            xs = [r[i] for r in rows]
            print(f"   {name:14}{statistics.median(xs):8.0f}{max(xs):8.0f}")
        results = [bench_live(s, b, lambda go: live_dag_graph(go), "B. 1,000-step DAG, 200 ends/s", tmp)]
        for rate in [int(r) for r in args.rates.split(",") if r]:
            results.append(bench_live(s, b, lambda go, r=rate: output_graph(go, r), f"C. output {rate}/s", tmp))
        print("\nlive updates after the release (ev/s from the events' own times; lag = stream chunk read -> in the DOM;"
              " e2e = server event time -> in the DOM), ms:")
        print(f"   {'scenario':32}{'events':>7}{'ev/s':>7}{'shown':>7}{'lag p50':>8}{'p95':>6}{'max':>6}{'e2e p50':>8}{'p95':>6}{'max':>6}")
        for r in results:
            ok = "all" if r["all_shown"] else "NOT"
            print(f"   {r['label']:32}{r['events']:7d}{r['rate']:7.0f}{ok:>7}"
                  f"{pct(r['lags'], 50):8.1f}{pct(r['lags'], 95):6.1f}{max(r['lags'] or [0]):6.1f}"
                  f"{pct(r['e2e'], 50):8.0f}{pct(r['e2e'], 95):6.0f}{max(r['e2e'] or [0]):6.0f}")
        print(f"\n   (B's page, 1,000 pending steps, drew its DAG {results[0]['drawn']:.0f} ms after navigation start)")
        bad = [r["label"] for r in results if not r["all_shown"]]
        if bad:
            print(f"events missing on the page in: {bad}", file=sys.stderr)
            return 1
        return 0
    finally:
        if b:
            b.quit()
        s.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
