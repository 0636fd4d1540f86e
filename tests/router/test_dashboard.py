#!/usr/bin/env python3
"""fedrouter dashboard test: GET /dashboard rendered by headless Chromium.

Starts three kubesim clusters (us-east and us-west in region us, ap-tokyo
in region apac, one node of 10 pods) and fedrouter with two tenants and
prices for us-east and us-west only (the harness of test_router.py), creates two warm pools and sandboxes (warm,
cold, and a batch for APAC that does not fit in ap-tokyo) so the numbers
are not trivial, then opens the router's /dashboard in Debian's headless
Chromium (/usr/bin/chromium) and checks the rendered DOM (--dump-dom)
against the API:

  * without a token: the token form is shown and no cluster data;
  * with ?token=: every cluster of GET /v1/clusters has one card
    (data-cluster) inside its region's section, with the sandbox count,
    free/total slots of the default shape, cpu requested/allocatable, node
    counts, health and warm ready/target per pool; every pool of GET
    /v1/pools has a row with ready/target per cluster and in total; the
    totals add up; cost figures match /v1/clusters' `cost` object where the
    router has it and read "n/a" where it does not; the policy version is
    /v1/policy's; the spillover section shows GET /v1/events when that
    answers 200 and is hidden otherwise;
  * the charts (the router keeps its in-memory history every second:
    metrics.history_step_s = 1): every chart of GET /v1/history is drawn as
    SVG paths whose data-points are the API's own (time, value) pairs —
    sandboxes against capacity per region and cluster, creates per second
    by outcome, cold start p50/p99, warm hit rate, spend per hour by region
    and tenant — with the values the test caused (sandboxes, creates,
    spend); the page says the history is in memory; the top tenants table
    is the API's.

The page refreshes every 2 s, so each value is compared with the API's
answer just before and just after Chromium ran, and either is accepted.
Numbers are read from data-value attributes (the raw API values); the
visible text is checked where it is not a formatted number.

A screenshot (--window-size=1440,1000) is saved as <shots>/dashboard.png
and must be a PNG of that size with the charts drawn in it: the pixels of
the chart lines' colours are counted (the PNG is decoded here, zlib only).

A missing /usr/bin/chromium is a failure, not a skip: scripts/test installs
Debian's chromium package (scripts/lib/packages.sh).

Usage: test_dashboard.py --fedrouter PATH --kubesim PATH --shots DIR
                         [--chromium PATH] [--page FILE] [--keep]
--page FILE serves FILE as /dashboard from a small local proxy that passes
everything else to the router: for working on the page without rebuilding
(or before the router has the route).
Prints `ok NAME` / `FAIL NAME: details` per check and `N passed, M failed`;
exits 1 if any failed. Python 3 standard library only.
"""
import argparse
import html.parser
import http.client
import http.server
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

sys.dont_write_bytecode = True   # do not leave __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402  (the harness: Kubesim, Router, Fed, api_call, ...)
from test_router import TestFailure, check, short, wait_until, tail  # noqa: E402

ARGS = None
WATCHDOG_S = 280        # ctest's TIMEOUT is 300: clean up ourselves before it
IMAGE = tr.IMAGE
TOKEN = tr.TOKEN_A
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-extensions", "--disable-default-apps", "--mute-audio",
                  "--hide-scrollbars", "--force-color-profile=srgb", "--lang=en-US"]
# Prices (docs/metrics.md): us-east by the node, us-west by the resource,
# ap-tokyo none (its cost must read n/a, only the hosted equivalent known).
COSTS = {
    "us-east": "cost = { node_hour = 0.093; sandboxes_per_node = 1; };",
    "us-west": "cost = { per_core_hour = 0.0316; per_gib_hour = 0.0042; };",
}
CLUSTERS = [
    ("us-east", "us", ["--nodes", "2", "--node-cpu", "16", "--node-memory", "64Gi"]),
    ("us-west", "us", ["--nodes", "2", "--node-cpu", "16", "--node-memory", "64Gi"]),
    ("ap-tokyo", "apac", ["--nodes", "1", "--node-pods", "10", "--node-cpu", "16", "--node-memory", "64Gi"]),
]


# --------------------------------------------------------------------------
# the rendered DOM

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent = tag, dict(attrs), parent
        self.kids = []          # Nodes and str

    def text(self):
        return "".join(k if isinstance(k, str) else k.text() for k in self.kids)

    def walk(self):
        for k in self.kids:
            if isinstance(k, Node):
                yield k
                yield from k.walk()

    def find(self, **attrs):
        """Descendants whose attributes equal <attrs> (underscores in names
        stand for dashes; None means "present")."""
        want = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [n for n in self.walk()
                if all(k in n.attrs and (v is None or n.attrs[k] == v) for k, v in want.items())]

    def one(self, what, **attrs):
        got = self.find(**attrs)
        check(len(got) == 1, f"{what}: expected exactly one element with {attrs}, found {len(got)}")
        return got[0]

    def hidden(self):
        n = self
        while n is not None:
            if "hidden" in n.attrs:
                return True
            n = n.parent
        return False

    def ancestor(self, **attrs):
        n = self.parent
        while n is not None:
            if all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                return n
            n = n.parent
        return None


class DomBuilder(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        n = Node(tag, [(k, "" if v is None else v) for k, v in attrs], self.cur)
        self.cur.kids.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_startendtag(self, tag, attrs):
        self.cur.kids.append(Node(tag, [(k, "" if v is None else v) for k, v in attrs], self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.kids.append(data)


def parse_dom(text):
    b = DomBuilder()
    b.feed(text)
    b.close()
    return b.root


# --------------------------------------------------------------------------
# Chromium

def chromium(args, tmp, timeout=90):
    """Runs headless Chromium with <args>; returns (rc, stdout, stderr)."""
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp)
    argv = [ARGS.chromium] + CHROMIUM_FLAGS + ["--user-data-dir=" + profile] + args
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    tr.ALL_PROCS.append(p)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise TestFailure(f"chromium {' '.join(args)} did not finish within {timeout} s:\n"
                          f"{err.decode(errors='replace')[-2000:]}")
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)   # helpers (zygote, gpu) left behind, if any
        except OSError:
            pass
        shutil.rmtree(profile, ignore_errors=True)
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def dump_dom(url, tmp):
    rc, out, err = chromium(["--virtual-time-budget=5000", "--dump-dom", url], tmp)
    check(rc == 0 and "<html" in out.lower(),
          f"chromium --dump-dom {url}: rc {rc}, {len(out)} bytes of DOM; stderr:\n{err[-2000:]}")
    return parse_dom(out), out


# --------------------------------------------------------------------------
# --page: serve a page file in front of the router

def start_page_proxy(page_file, router_port):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            path = urllib.parse.urlsplit(self.path).path
            if path == "/dashboard":
                with open(page_file, "rb") as f:
                    body = f.read()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)
                return
            c = http.client.HTTPConnection("127.0.0.1", router_port, timeout=30)
            try:
                hdrs = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "accept")}
                c.request("GET", self.path, headers=hdrs)
                r = c.getresponse()
                body = r.read()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() in ("content-type", "www-authenticate", "x-request-id", "cache-control"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            finally:
                c.close()

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


# --------------------------------------------------------------------------
# the federation and its state

class DashFed(tr.Fed):
    """tr.Fed with the COSTS prices in the clusters' config entries."""

    def write_config(self, path, lifetime):
        super().write_config(path, lifetime)
        with open(path) as f:
            text = f.read()
        for name, cost in COSTS.items():
            entry = f'{{ name = "{name}"; '
            check(text.count(entry) == 1, f"config: no single entry {entry!r} to price")
            text = text.replace(entry, entry + cost + " ")
        with open(path, "w") as f:
            f.write(text + "metrics = { history_step_s = 1; };\n")


def setup_state(fed):
    """Pools and sandboxes so that every number on the page is non-trivial."""
    st, r = fed.api("POST", "/v1/pools", {"name": "default", "image": IMAGE, "cpus": 1, "memory_gb": 2,
                                          "replicas": 3})
    check(st == 201, f"POST /v1/pools default: {st} {short(r)}")
    st, r = fed.api("POST", "/v1/pools", {"name": "big", "image": IMAGE, "cpus": 2, "memory_gb": 4,
                                          "replicas": 2, "clusters": ["us-east"]})
    check(st == 201, f"POST /v1/pools big: {st} {short(r)}")
    wait_pools_full(fed, 40)
    fed.create({"name": "warm-east", "pool": "default", "num_sandboxes": 4, "clusters": ["us-east"]})
    fed.create({"name": "big-east", "pool": "big", "num_sandboxes": 1, "clusters": ["us-east"]})
    fed.create({"name": "cold-west", "image": IMAGE, "num_sandboxes": 2, "clusters": ["us-west"]})
    # ap-tokyo has 10 pod slots, 3 of them warm: a batch of 14 for APAC
    # (warm first, then cold) fills it and spills the rest to region us.
    fed.create({"name": "apac", "pool": "default", "num_sandboxes": 14, "region": "apac"})
    fed.create({"name": "other-tenant", "image": IMAGE, "num_sandboxes": 1, "clusters": ["us-west"]},
               token=tr.TOKEN_B)
    wait_pools_full(fed, 40)


def wait_pools_full(fed, timeout):
    def full():
        st, r = fed.api("GET", "/v1/pools")
        if st != 200:
            return False
        # ap-tokyo may have no room left to refill its warm pods: count only
        # clusters with free slots.
        room = {c["name"]: (c.get("slots") or [{}])[0].get("free", 0) for c in clusters(fed)}
        return all(pc.get("ready") == pc.get("target") or room.get(pc.get("cluster"), 0) == 0
                   for p in r["pools"] for pc in p.get("clusters", []))
    wait_until(full, timeout, 0.25)

    def settled():
        return all(c.get("inflight_creates", 0) == 0 for c in clusters(fed))
    wait_until(settled, 10, 0.2)


def clusters(fed):
    st, r = fed.api("GET", "/v1/clusters")
    check(st == 200 and isinstance(r, dict) and isinstance(r.get("clusters"), list),
          f"GET /v1/clusters: {st} {short(r)}")
    return r["clusters"]


def snapshot(fed):
    st, p = fed.api("GET", "/v1/pools")
    check(st == 200, f"GET /v1/pools: {st} {short(p)}")
    st, pol = fed.api("GET", "/v1/policy")
    check(st == 200, f"GET /v1/policy: {st} {short(pol)}")
    st, ev = fed.api("GET", "/v1/events")
    st, hist = fed.api("GET", "/v1/history?window=1h")
    check(st == 200 and isinstance(hist, dict) and isinstance(hist.get("t"), list), f"GET /v1/history: {st} {short(hist)}")
    return {"history": hist, "clusters": {c["name"]: c for c in clusters(fed)},
            "cluster_order": [c["name"] for c in clusters(fed)],
            "pools": {x["name"]: x for x in p["pools"]}, "policy": pol,
            "events": ev.get("events") if st == 200 and isinstance(ev, dict) else None}


# --------------------------------------------------------------------------
# checks

def num(node, name, where):
    """The data-value of the one data-field=<name> under <node>, as a number
    (None when the element has no data-value, i.e. "n/a")."""
    el = node.one(f"{where} data-field={name}", data_field=name)
    v = el.attrs.get("data-value")
    if v is None:
        return None
    try:
        f = float(v)
    except ValueError:
        raise TestFailure(f"{where} data-field={name}: data-value {v!r} is not a number")
    return int(f) if f.is_integer() else f


def same(got, want):
    if got is None or want is None:
        return got is None and want is None
    return abs(float(got) - float(want)) <= 1e-9 * max(1.0, abs(float(want)))


def expect_num(node, name, where, candidates):
    """data-field=<name> under <node> must equal one of <candidates> (the
    API's value before and after); None means the page must say n/a."""
    got = num(node, name, where)
    if not any(same(got, c) for c in candidates):
        raise TestFailure(f"{where}: {name} shows {got!r}, the API said {' then '.join(map(repr, candidates))}")
    if got is None:
        txt = node.one(where, data_field=name).text().strip()
        check(txt == "n/a", f"{where}: {name} has no value but reads {txt!r}, not 'n/a'")
    return got


def default_slots(c):
    for s in c.get("slots") or []:
        if s.get("pool") is None:
            return s
    return {}


def check_auth_form(dom):
    auth = dom.one("token form section", id="auth")
    check(not auth.hidden(), "without a token the token form (#auth) is hidden")
    dom.one("token input", id="token-input")
    cards = dom.find(data_cluster=None)
    check(not cards, f"without a token the page shows {len(cards)} cluster cards")
    check(dom.one("content", id="content").hidden(), "without a token #content is shown")


def check_clusters(dom, before, after):
    names = before["cluster_order"]
    check(set(names) == set(after["cluster_order"]), f"clusters changed during the test: {names} / {after['cluster_order']}")
    cards = dom.find(data_cluster=None)
    shown = [c.attrs["data-cluster"] for c in cards]
    check(sorted(shown) == sorted(names), f"cluster cards {shown}, API clusters {names}")
    for name in names:
        b, a = before["clusters"][name], after["clusters"][name]
        card = dom.one(f"card of {name}", data_cluster=name)
        where = f"card {name}"
        check(not card.hidden(), f"{where} is hidden")
        check(card.attrs.get("data-region") == b["region"], f"{where}: data-region {card.attrs.get('data-region')!r}, API {b['region']!r}")
        sec = card.ancestor(**{"class": "region"})
        check(sec is not None and sec.attrs.get("data-region") == b["region"],
              f"{where} is not inside the section of region {b['region']!r} "
              f"(in {sec.attrs.get('data-region') if sec else None!r})")
        check(name in card.one(where + " heading", id="cl-" + name).text(), f"{where}: heading lacks the name")
        expect_num(card, "sandboxes", where, [b["sandboxes"], a["sandboxes"]])
        expect_num(card, "warm-pods", where, [b["warm_pods"], a["warm_pods"]])
        expect_num(card, "free-slots", where, [default_slots(b).get("free"), default_slots(a).get("free")])
        expect_num(card, "total-slots", where, [default_slots(b).get("total"), default_slots(a).get("total")])
        expect_num(card, "cpu-requested", where, [b["capacity"]["cpu_millis"]["requested"], a["capacity"]["cpu_millis"]["requested"]])
        expect_num(card, "cpu-allocatable", where, [b["capacity"]["cpu_millis"]["allocatable"], a["capacity"]["cpu_millis"]["allocatable"]])
        expect_num(card, "mem-requested", where, [b["capacity"]["memory_bytes"]["requested"], a["capacity"]["memory_bytes"]["requested"]])
        expect_num(card, "nodes-ready", where, [b["nodes"]["ready"], a["nodes"]["ready"]])
        expect_num(card, "nodes-total", where, [b["nodes"]["total"], a["nodes"]["total"]])
        lat = num(card, "api-latency-ms", where)
        check(lat is not None and lat >= 0, f"{where}: api-latency-ms {lat!r}")
        health = card.one(where + " health", data_field="health")
        want = {("closed", True): "closed", ("half-open", False): "half-open", ("open", False): "open"}
        ok_vals = {want.get((x["breaker"], x["healthy"]), "?") for x in (b, a)}
        check(health.attrs.get("data-value") in ok_vals and "healthy" in health.text(),
              f"{where}: health {health.attrs.get('data-value')!r} ({health.text()!r}), breaker {b['breaker']}/{a['breaker']}")
        # warm depth per pool, as /v1/clusters reports it for this cluster
        bp = {p["name"]: p for p in b.get("pools", [])}
        ap = {p["name"]: p for p in a.get("pools", [])}
        items = {li.attrs["data-pool"]: li for li in card.find(data_pool=None)}
        check(set(items) == set(bp) | set(ap) and set(bp) == set(ap),
              f"{where}: warm pools shown {sorted(items)}, API {sorted(bp)}")
        for pname, li in items.items():
            w = f"{where} pool {pname}"
            expect_num(li, "warm-ready", w, [bp[pname]["ready"], ap[pname]["ready"]])
            expect_num(li, "warm-target", w, [bp[pname]["target"], ap[pname]["target"]])
        # cost: the router's figures, or n/a while it has none
        for key, fld in (("now", "cost-now"), ("capacity", "cost-capacity"),
                         ("hosted_equivalent", "cost-hosted"), ("savings", "cost-savings")):
            vals = [(x.get("cost") or {}).get(key) for x in (b, a)]
            expect_num(card, fld, where, vals)


def check_totals(dom, before, after):
    tot = dom.one("totals", id="totals")
    cands = lambda f: [f(s) for s in (before, after)]  # noqa: E731
    expect_num(tot, "clusters-total", "totals", cands(lambda s: len(s["clusters"])))
    expect_num(tot, "clusters-healthy", "totals",
               cands(lambda s: sum(1 for c in s["clusters"].values() if c["healthy"] and c["synced"])))
    expect_num(tot, "total-sandboxes", "totals", cands(lambda s: sum(c["sandboxes"] for c in s["clusters"].values())))
    expect_num(tot, "total-free-slots", "totals",
               cands(lambda s: sum(default_slots(c).get("free", 0) for c in s["clusters"].values())))
    expect_num(tot, "total-slots", "totals",
               cands(lambda s: sum(default_slots(c).get("total", 0) for c in s["clusters"].values())))
    expect_num(tot, "total-warm-ready", "totals",
               cands(lambda s: sum(pc["ready"] for p in s["pools"].values() for pc in p["clusters"])))
    expect_num(tot, "total-warm-target", "totals",
               cands(lambda s: sum(pc["target"] for p in s["pools"].values() for pc in p["clusters"])))
    for key, fld in (("now", "total-cost-now"), ("capacity", "total-cost-capacity"),
                     ("hosted_equivalent", "total-cost-hosted"), ("savings", "total-savings")):
        def total(s, key=key):
            v = [(c.get("cost") or {}).get(key) for c in s["clusters"].values()]
            v = [x for x in v if isinstance(x, (int, float))]
            return sum(v) if v else None
        got = num(tot, fld, "totals")
        want = cands(total)
        check(any((got is None and w is None) or (got is not None and w is not None and abs(got - w) < 1e-6)
                  for w in want), f"totals: {fld} shows {got!r}, the API's sum is {want}")


def check_pools(dom, before, after):
    names = sorted(before["pools"])
    check(names == sorted(after["pools"]), f"pools changed during the test: {names} / {sorted(after['pools'])}")
    table = dom.one("pools table", id="pools")
    rows = {r.attrs["data-pool"]: r for r in table.find(data_pool=None)}
    check(sorted(rows) == names, f"pool rows {sorted(rows)}, API pools {names}")
    for pname in names:
        b, a = before["pools"][pname], after["pools"][pname]
        row, where = rows[pname], f"pool row {pname}"
        check(b.get("image", "") in row.text(), f"{where}: image {b.get('image')!r} not shown")
        expect_num(row, "pool-ready", where, [sum(pc["ready"] for pc in x["clusters"]) for x in (b, a)])
        expect_num(row, "pool-target", where, [sum(pc["target"] for pc in x["clusters"]) for x in (b, a)])
        bc = {pc["cluster"]: pc for pc in b["clusters"]}
        ac = {pc["cluster"]: pc for pc in a["clusters"]}
        chips = {c.attrs["data-pool-cluster"]: c for c in row.find(data_pool_cluster=None)}
        check(set(chips) == set(bc) == set(ac), f"{where}: clusters shown {sorted(chips)}, API {sorted(bc)}")
        for cname, chip in chips.items():
            w = f"{where} cluster {cname}"
            expect_num(chip, "warm-ready", w, [bc[cname]["ready"], ac[cname]["ready"]])
            expect_num(chip, "warm-target", w, [bc[cname]["target"], ac[cname]["target"]])


def check_policy(dom, before, after):
    box = dom.one("policy panel", id="policy")
    ver = box.one("policy version", data_field="policy-version")
    want = {before["policy"].get("version"), after["policy"].get("version")}
    check(ver.attrs.get("data-value") in want, f"policy version {ver.attrs.get('data-value')!r}, API {want}")
    src = box.one("policy source", data_field="policy-source").text()
    check(src in {before["policy"].get("source"), after["policy"].get("source")},
          f"policy source {src!r}, API {before['policy'].get('source')!r}")
    expect_num(box, "policy-reloads", "policy", [before["policy"].get("reloads"), after["policy"].get("reloads")])
    err = box.find(data_field="policy-error")
    has_err = [s["policy"].get("last_reload_error") is not None for s in (before, after)]
    check(bool(err) in has_err, f"policy error box shown: {bool(err)}, API last_reload_error set: {has_err}")


def check_events(dom, before, after):
    sec = dom.one("events section", id="events")
    evs = [s["events"] for s in (before, after)]
    if evs[0] is None and evs[1] is None:
        check(sec.hidden(), "GET /v1/events is not 200, yet the spillover section is shown")
        return "hidden (no /v1/events)"
    check(not sec.hidden(), "GET /v1/events answers 200, yet the spillover section is hidden")
    rows = sec.find(**{"class": "event"})
    want = [min(len(e), 15) for e in evs if e is not None]
    check(len(rows) in want, f"spillover rows {len(rows)}, API events {[len(e) for e in evs if e is not None]}")
    clusters_in_api = {e.get("cluster") for es in evs if es for e in es}
    for r in rows:
        check(r.attrs.get("data-event-cluster") in clusters_in_api,
              f"spillover row for {r.attrs.get('data-event-cluster')!r}, not an API event's cluster")
    return f"{len(rows)} rows"


def history_series(hist):
    """{(chart, series key): [(t, v), ...]} as the page must draw them."""
    t = hist["t"]
    out = {}

    def pts(values):
        return [(t[i], v) for i, v in enumerate(values) if v is not None]
    for s in hist["sandboxes"]:
        out[("sandboxes-" + s["region"], "sandboxes:" + s["cluster"])] = pts(s["values"])
    for s in hist["capacity"]:
        out[("sandboxes-" + s["region"], "capacity:" + s["cluster"])] = pts(s["values"])
    for k, v in hist["creates_per_s"].items():
        out[("creates", k)] = pts(v)
    for k, v in hist["cold_start_s"].items():
        out[("cold-start", k)] = pts(v)
    out[("warm-hit-rate", "hit")] = pts(hist["warm_hit_rate"])
    for s in hist["spend_per_hour"]["by_region"]:
        out[("spend-region", s["region"])] = pts(s["values"])
    for s in hist["spend_per_hour"]["by_tenant"]:
        out[("spend-tenant", s["tenant"])] = pts(s["values"])
    return out


def check_history(dom, before, after):
    src = dom.one("history source", data_field="history-source")
    check(src.attrs.get("data-value") == "memory" and "in memory" in src.text(),
          f"the page says where its history comes from: {src.attrs.get('data-value')!r} {src.text()!r}")
    want = [history_series(x["history"]) for x in (before, after)]
    figs = {f.attrs["data-chart"]: f for f in dom.find(data_chart=None)}
    charts = {c for c, _ in want[0]} | {c for c, _ in want[1]}
    check(charts <= set(figs), f"charts missing from the page: {sorted(charts - set(figs))} (drawn: {sorted(figs)})")
    drawn = 0
    for (chart, key) in set(want[0]) | set(want[1]):
        paths = figs[chart].find(data_series=key)
        check(len(paths) == 1, f"chart {chart}: {len(paths)} paths for series {key!r}")
        raw = paths[0].attrs.get("data-points", "")
        got = [(float(a), float(b)) for a, b in (p.split(":") for p in raw.split())] if raw else []
        # The page drew an answer of the API between the two snapshots: the
        # history only grows (its points never change), so every point of
        # the first snapshot is drawn and every point drawn is the second's.
        first = {(float(t), float(v)) for t, v in want[0].get((chart, key), [])}
        second = {(float(t), float(v)) for t, v in want[1].get((chart, key), [])}
        check(first <= set(got) <= first | second and len(set(got)) == len(got),
              f"chart {chart} series {key}: the page drew {got[-5:]} (last 5 of {len(got)}), the API said "
              f"{sorted(first)[-5:]} then {sorted(second)[-5:]}")
        if got:
            # one move or line command per point drawn
            d = paths[0].attrs.get("d", "")
            check(d.count("M") + d.count("L") == len(got),
                  f"chart {chart} series {key}: path d {d[:80]!r} does not draw its {len(got)} points")
            drawn += 1
    # What the test did shows: sandboxes in us-east, cold creates, a's spend.
    last = lambda k: [v for _, v in want[1].get(k, [])]  # noqa: E731
    check(max(last(("sandboxes-us", "sandboxes:us-east")) or [0]) >= 5,
          f"us-east's sandboxes over the window: {last(('sandboxes-us', 'sandboxes:us-east'))[-5:]}")
    check(any(v > 0 for v in last(("creates", "cold"))), "no cold creates per second drawn")
    check(any(v > 0 for v in last(("spend-tenant", "a"))), "tenant a's spend per hour is never above 0")
    check(("spend-tenant", "b") not in want[1], "tenant a's page shows tenant b's spend")
    rows = {r.attrs["data-tenant"]: r for r in dom.one("top tenants", id="top-tenants").find(data_tenant=None)}
    check(set(rows) in ({x["tenant"] for x in s["history"]["top_tenants"]} for s in (before, after)),
          f"top tenants {sorted(rows)}, API {[x['tenant'] for x in after['history']['top_tenants']]}")
    for name, row in rows.items():
        # spend over the window grows with every point: the page's answer
        # lies between the two snapshots
        lo, hi = ([x["dollars"] for x in s["history"]["top_tenants"] if x["tenant"] == name] or [None]
                  for s in (before, after))
        got = num(row, "tenant-dollars", f"top tenant {name}")
        check(got is not None and lo[0] is not None and hi[0] is not None and lo[0] - 1e-9 <= got <= hi[0] + 1e-9,
              f"top tenant {name}: the page shows ${got}, the API ${lo[0]} then ${hi[0]}")
    return f"{len(figs)} charts, {drawn} series drawn"


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB/RGBA PNG."""
    import zlib
    with open(path, "rb") as f:
        data = f.read()
    pos, idat = 8, b""
    w = h = ctype = None
    while pos < len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if typ == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            check(depth == 8 and ctype in (2, 6) and interlace == 0, f"PNG depth {depth} type {ctype} interlace {interlace}")
        elif typ == b"IDAT":
            idat += body
        pos += 12 + n
    bpp = 4 if ctype == 6 else 3
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif ft == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, rows, bpp


def count_colour(path, rgb, most_white=0.6):
    """Pixels of colour <rgb> blended with the white of a chart's card (as
    antialiased lines are) with at least 1 - <most_white> of the colour."""
    w, h, rows, bpp = png_pixels(path)
    n = 0
    for line in rows:
        for i in range(0, w * bpp, bpp):
            ws = [(line[i + k] - rgb[k]) / (255.0 - rgb[k]) for k in range(3)]
            if min(ws) >= -0.06 and max(ws) - min(ws) <= 0.1 and max(ws) <= most_white:
                n += 1
    return n


def check_png(path, w, h):
    check(os.path.isfile(path), f"no screenshot at {path}")
    with open(path, "rb") as f:
        head = f.read(33)
    check(head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG (starts with {head[:8]!r})")
    check(head[12:16] == b"IHDR", f"{path}: no IHDR chunk first")
    pw, ph = struct.unpack(">II", head[16:24])
    check((pw, ph) == (w, h), f"{path}: {pw}x{ph}, want {w}x{h}")
    return os.path.getsize(path)


# --------------------------------------------------------------------------
# runner

class Results:
    def __init__(self):
        self.items = []

    def run(self, name, fn, *a):
        t0 = time.monotonic()
        try:
            note = fn(*a)
            self.items.append((name, True))
            print(f"ok   {name} ({time.monotonic() - t0:.1f} s){' — ' + note if isinstance(note, str) else ''}", flush=True)
            return True
        except TestFailure as e:
            self.items.append((name, False))
            print(f"FAIL {name} ({time.monotonic() - t0:.1f} s): {e}", flush=True)
        except Exception as e:
            self.items.append((name, False))
            print(f"FAIL {name} ({time.monotonic() - t0:.1f} s): {type(e).__name__}: {e}\n"
                  f"{traceback.format_exc(limit=4)}", flush=True)
        return False


def watchdog():
    time.sleep(WATCHDOG_S)
    print(f"FAIL watchdog: the test ran over {WATCHDOG_S} s; killing everything", flush=True)
    for p in tr.ALL_PROCS:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(1)


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fedrouter", required=True)
    ap.add_argument("--kubesim", required=True)
    ap.add_argument("--shots", required=True, help="directory for dashboard.png")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--page", help="serve this HTML file as /dashboard via a local proxy to the router")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories (logs)")
    ARGS = ap.parse_args()
    tr.ARGS = argparse.Namespace(fedrouter=ARGS.fedrouter, kubesim=ARGS.kubesim, keep=ARGS.keep, only=[])

    if not (os.path.isfile(ARGS.chromium) and os.access(ARGS.chromium, os.X_OK)):
        print(f"FAIL chromium: {ARGS.chromium} not found. This test needs Debian's headless Chromium: "
              f"`apt-get install chromium` (scripts/test installs it from scripts/lib/packages.sh).", flush=True)
        print("0 passed, 1 failed")
        return 1
    threading.Thread(target=watchdog, daemon=True).start()
    os.makedirs(ARGS.shots, exist_ok=True)
    shot = os.path.join(ARGS.shots, "dashboard.png")
    if os.path.exists(shot):
        os.unlink(shot)

    res = Results()
    t_all = time.monotonic()
    fed = None
    try:
        fed = DashFed("dash", CLUSTERS)
    except Exception as e:
        print(f"FAIL federation: did not start: {e}", flush=True)
        print("0 passed, 1 failed")
        return 1
    tmp = tempfile.mkdtemp(prefix="chromium-", dir=fed.root)
    proxy = None
    try:
        if not res.run("setup_pools_and_sandboxes", setup_state, fed):
            raise TestFailure("setup failed")
        port = fed.router.port
        if ARGS.page:
            proxy = start_page_proxy(os.path.abspath(ARGS.page), port)
            port = proxy.server_address[1]
            print(f"# serving {ARGS.page} as /dashboard on 127.0.0.1:{port} (proxy to the router)", flush=True)
        base = f"http://127.0.0.1:{port}/dashboard"

        def route():
            st, body, h = tr.api_call(port, "GET", "/dashboard", full=True)
            text = body if isinstance(body, str) else json.dumps(body)
            check(st == 200, f"GET /dashboard: {st} {short(text)} — the router does not serve the page")
            check(h.get("content-type", "").startswith("text/html"), f"GET /dashboard Content-Type {h.get('content-type')!r}")
            check("data-cluster" in text and "<script" in text and "v1/clusters" in text,
                  "GET /dashboard is not the dashboard page")
            for ext in ("src=\"http", "href=\"http", "@import", "url(http"):
                check(ext not in text, f"the page loads an external asset ({ext!r})")
            return f"{len(text)} bytes"
        if not res.run("dashboard_route", route):
            raise TestFailure("no page")

        def no_token():
            dom, _ = dump_dom(base, tmp)
            check_auth_form(dom)
        res.run("dashboard_asks_for_token", no_token)

        state = {}
        # The in-memory history samples every second: a few points after
        # the setup, so every chart has lines to draw.
        t_setup = time.time()
        check(wait_until(lambda: len([t for t in fed.api("GET", "/v1/history")[1]["t"] if t > t_setup]) >= 3, 20, 0.3),
              "the history has no points after the setup")

        def render():
            state["before"] = snapshot(fed)
            state["dom"], state["html"] = dump_dom(base + "?token=" + urllib.parse.quote(TOKEN), tmp)
            state["after"] = snapshot(fed)
            if ARGS.keep:
                with open(os.path.join(ARGS.shots, "dashboard.dom.html"), "w") as f:
                    f.write(state["html"])
            dom = state["dom"]
            check(not dom.one("content", id="content").hidden(), "with ?token= the content is still hidden")
            check(dom.one("auth", id="auth").hidden(), "with ?token= the token form is shown")
            prob = dom.one("problem banner", id="problem")
            check(prob.hidden(), f"the page shows a problem: {prob.text()!r}")
            st = dom.one("status", id="status-text").text()
            check(st.startswith("live"), f"status line {st!r}")
            nb = sum(c["sandboxes"] for c in state["before"]["clusters"].values())
            return f"{len(state['html'])} bytes of DOM, {len(state['before']['clusters'])} clusters, {nb} sandboxes"
        if res.run("dashboard_renders", render):
            b, a, dom = state["before"], state["after"], state["dom"]
            res.run("dashboard_clusters", check_clusters, dom, b, a)
            res.run("dashboard_totals", check_totals, dom, b, a)
            res.run("dashboard_pools", check_pools, dom, b, a)
            res.run("dashboard_policy", check_policy, dom, b, a)
            res.run("dashboard_events", check_events, dom, b, a)
            res.run("dashboard_history_charts", check_history, dom, b, a)
            has_cost = any(c.get("cost") for c in b["clusters"].values())
            print(f"    (cost in /v1/clusters: {'yes' if has_cost else 'not yet: the page must say n/a'}; "
                  f"/v1/events: {'yes' if b['events'] is not None else 'no'})", flush=True)

        def screenshot():
            rc, out, err = chromium(["--virtual-time-budget=5000", "--window-size=1440,1000",
                                     "--screenshot=" + shot, base + "?token=" + urllib.parse.quote(TOKEN)], tmp)
            check(rc == 0, f"chromium --screenshot: rc {rc}:\n{err[-2000:]}")
            n = check_png(shot, 1440, 1000)
            # The charts' third colour (#1c8a4a) is on no other part of the
            # page: its pixels are the lines drawn (a legend's swatch adds
            # ~40; a line across a chart ~500).
            green = count_colour(shot, (0x1c, 0x8a, 0x4a))
            check(green >= 300, f"the screenshot has {green} pixels of the charts' green: the charts are not drawn")
            return f"{shot} ({n} bytes, {green} chart pixels of one colour)"
        res.run("dashboard_screenshot", screenshot)
    except TestFailure:
        pass
    finally:
        if proxy is not None:
            proxy.shutdown()
        problems = fed.teardown()
        res.items.append(("teardown", not problems))
        print("ok   teardown" if not problems else "FAIL teardown: " + "\n".join(problems), flush=True)
    failed = [n for n, ok in res.items if not ok]
    print(f"{len(res.items) - len(failed)} passed, {len(failed)} failed ({time.monotonic() - t_all:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    finally:
        for p in tr.ALL_PROCS:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
    sys.exit(rc)
