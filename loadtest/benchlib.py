"""loadtest/benchlib.py - what the Python benchmarks share: wrk runs parsed
into numbers, a process's RSS, and a sampler of its peak while work runs.
Python 3 stdlib only."""
import re
import subprocess
import threading


class BenchError(Exception):
    """A benchmark step did not work (the message says what)."""


def rss_kib(pid):
    """VmRSS of <pid> in KiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class PeakRss:
    """`with PeakRss(pid) as p:` samples <pid>'s RSS every 50 ms while the
    block runs: p.before, p.peak (KiB)."""

    def __init__(self, pid):
        self.pid = pid
        self.before = self.peak = rss_kib(pid)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_kib(self.pid))

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, rss_kib(self.pid))


def wrk(url, headers, seconds, conns=16, max_fail_ratio=0.0):
    """wrk (one thread, <conns> keep-alive connections, <seconds>) against
    <url> with <headers> ("Name: value"): {"rps", "p50_ms", "p99_ms",
    "requests", "non_2xx"}. More than <max_fail_ratio> of the requests
    answered other than 2xx/3xx raises BenchError with wrk's output."""
    argv = ["wrk", "-t", "1", "-c", str(conns), "-d", f"{seconds}s", "--latency"]
    for h in headers:
        argv += ["-H", h]
    out = subprocess.run(argv + [url], capture_output=True, text=True, timeout=seconds + 60).stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    bad = int(non2xx.group(1)) if non2xx else 0

    def lat(q):
        m = re.search(r"^\s+%d%%\s+([\d.]+)(us|ms|s)" % q, out, re.M)
        if not m:
            return None
        v = float(m.group(1))
        return v / 1000 if m.group(2) == "us" else v if m.group(2) == "ms" else v * 1000
    if not rps or not total or bad > max_fail_ratio * int(total.group(1)):
        raise BenchError(f"wrk {url}: {out}")
    return {"rps": float(rps.group(1)), "p50_ms": lat(50), "p99_ms": lat(99), "requests": int(total.group(1)),
            "non_2xx": bad}
