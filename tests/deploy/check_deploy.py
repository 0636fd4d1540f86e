#!/usr/bin/env python3
"""check_deploy.py - deploy/ uses exactly the metrics docs/metrics.md exports.

Checks, with the standard library only:
  - deploy/grafana-dashboard.json loads, is a dashboard Grafana can import
    (schemaVersion, unique panel ids, grid positions inside 24 columns and
    not overlapping, every panel and query on the ${DS_PROMETHEUS} data
    source variable, which the templating defines);
  - every fedrouter_* name in its PromQL expressions and variable queries is
    a metric of docs/metrics.md's table (a histogram only through its
    _bucket/_sum/_count series), every label matcher names a label of that
    metric with, for enumerated labels, one of the documented values, and
    every `by (...)` and legend {{label}} names a label the metrics have;
  - every metric of the table appears on the dashboard;
  - deploy/prometheus.yml scrapes /metrics (and passes `promtool check
    config` when promtool is installed).

Usage: check_deploy.py [REPO_ROOT]   (default: two folders up from here)
Exit: 0 all good, 1 problems found (each printed), 2 a file is missing.
"""
import json
import os
import re
import shutil
import subprocess
import sys

HIST_SUFFIXES = ("_bucket", "_sum", "_count")
# Labels Prometheus attaches to every scraped series (job, instance) and the
# target label deploy/prometheus.yml adds (service).
TARGET_LABELS = {"job", "instance", "service"}
DS_REF = "${DS_PROMETHEUS}"

problems = []


def problem(msg):
    problems.append(msg)


def parse_metric_table(text):
    """{name: {"type": str, "labels": {label: set(values) or None}}} from
    the rows of the table whose first cell is a `fedrouter_*` name."""
    metrics = {}
    for line in text.splitlines():
        m = re.match(r"^\|\s*`(fedrouter_[a-z0-9_]+)`\s*\|", line)
        if not m:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4:
            problem("docs/metrics.md: row of %s has %d cells, want 4" % (m.group(1), len(cells)))
            continue
        name, mtype, labels_cell = m.group(1), cells[1], cells[2]
        labels = {}
        # `label` or `label` (`v1`, `v2`): the parenthesis is consumed with
        # its label, so its values are not taken for labels.
        for lm in re.finditer(r"`([a-z_][a-z0-9_]*)`(\s*\(([^)]*)\))?", labels_cell):
            values = re.findall(r"`([^`]*)`", lm.group(3)) if lm.group(3) else None
            labels[lm.group(1)] = set(values) if values else None
        if name in metrics:
            problem("docs/metrics.md: %s is listed twice" % name)
        metrics[name] = {"type": mtype, "labels": labels}
    return metrics


def resolve(name, metrics):
    """(documented metric, is a histogram series) for a name used in a query,
    or (None, reason)."""
    if name in metrics:
        if metrics[name]["type"] == "histogram":
            return None, ("%s is a histogram: it has no series of its own, query %s_bucket, "
                          "_sum or _count" % (name, name))
        return name, False
    for suffix in HIST_SUFFIXES:
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            if base in metrics and metrics[base]["type"] == "histogram":
                return base, suffix == "_bucket"
    return None, "%s is not a metric of docs/metrics.md" % name


SELECTOR = re.compile(r"\b(fedrouter_[A-Za-z0-9_:]*)\s*(\{([^}]*)\})?")
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
BY_CLAUSE = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
LABEL_VALUES = re.compile(r"label_values\(\s*(fedrouter_[A-Za-z0-9_:]*)\s*(\{[^}]*\})?\s*,\s*"
                          r"([A-Za-z_][A-Za-z0-9_]*)\s*\)")


def check_expr(where, expr, metrics, used, legend=None):
    """Checks one PromQL expression (or label_values() query)."""
    allowed = set(TARGET_LABELS)
    seen = False
    for sm in SELECTOR.finditer(expr):
        seen = True
        base, info = resolve(sm.group(1), metrics)
        if base is None:
            problem("%s: %s" % (where, info))
            continue
        used.add(base)
        labels = dict(metrics[base]["labels"])
        if info:  # a _bucket series
            labels["le"] = None
        allowed.update(labels)
        for mm in MATCHER.finditer(sm.group(3) or ""):
            label, op, value = mm.groups()
            if label in TARGET_LABELS:
                continue
            if label not in labels:
                problem("%s: %s has no label %r (documented: %s)"
                        % (where, sm.group(1), label, ", ".join(sorted(labels)) or "none"))
            elif op == "=" and labels[label] is not None and value not in labels[label]:
                problem("%s: %s{%s=%r}: not a documented value (%s)"
                        % (where, sm.group(1), label, value, ", ".join(sorted(labels[label]))))
    for bm in BY_CLAUSE.finditer(expr):
        for label in (x.strip() for x in bm.group(1).split(",")):
            if label and label not in allowed:
                problem("%s: by (%s): no metric of the expression has the label %r"
                        % (where, bm.group(1), label))
    for lm in LABEL_VALUES.finditer(expr):
        base, _ = resolve(lm.group(1), metrics)
        if base is not None and lm.group(3) not in metrics[base]["labels"]:
            problem("%s: label_values(%s, %s): %s has no such label"
                    % (where, lm.group(1), lm.group(3), lm.group(1)))
    if legend:
        for label in re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", legend):
            if label not in allowed:
                problem("%s: legend {{%s}}: no metric of the expression has that label"
                        % (where, label))
    return seen


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def check_dashboard(path, metrics):
    """Checks the dashboard; returns the documented metrics it uses, or None
    when it does not load."""
    used = set()
    try:
        with open(path, encoding="utf-8") as f:
            dash = json.load(f)
    except json.JSONDecodeError as e:
        problem("%s: not valid JSON: %s" % (path, e))
        return None
    if not isinstance(dash, dict) or not isinstance(dash.get("panels"), list):
        problem("%s: not a dashboard (no panels list)" % path)
        return None
    if not isinstance(dash.get("schemaVersion"), int) or dash["schemaVersion"] < 36:
        problem("%s: schemaVersion %r, want >= 36" % (path, dash.get("schemaVersion")))
    for key in ("title", "uid"):
        if not dash.get(key):
            problem("%s: missing %s" % (path, key))

    variables = dash.get("templating", {}).get("list", [])
    ds_vars = [v for v in variables if v.get("name") == "DS_PROMETHEUS"]
    if not ds_vars or ds_vars[0].get("type") != "datasource" or ds_vars[0].get("query") != "prometheus":
        problem("%s: templating lacks the datasource variable DS_PROMETHEUS (type prometheus)" % path)
    nexpr = 0
    for v in variables:
        if v.get("type") != "query":
            continue
        where = "variable %s" % v.get("name")
        if (v.get("datasource") or {}).get("uid") != DS_REF:
            problem("%s: datasource is not %s" % (where, DS_REF))
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        for text in {q, v.get("definition", "")}:
            if text:
                if not check_expr(where, text, metrics, used):
                    problem("%s: query %r uses no fedrouter metric" % (where, text))

    ids = set()
    boxes = []
    for p in walk_panels(dash["panels"]):
        title = p.get("title", "?")
        where = "panel %r" % title
        if p.get("id") in ids:
            problem("%s: duplicate id %r" % (where, p.get("id")))
        ids.add(p.get("id"))
        g = p.get("gridPos") or {}
        if not all(isinstance(g.get(k), int) for k in ("x", "y", "w", "h")):
            problem("%s: gridPos needs integer x, y, w, h" % where)
        elif g["x"] < 0 or g["w"] < 1 or g["x"] + g["w"] > 24:
            problem("%s: gridPos %r is outside the 24 columns" % (where, g))
        else:
            for other, og in boxes:
                if (g["x"] < og["x"] + og["w"] and og["x"] < g["x"] + g["w"]
                        and g["y"] < og["y"] + og["h"] and og["y"] < g["y"] + g["h"]):
                    problem("%s overlaps panel %r" % (where, other))
            boxes.append((title, g))
        if p.get("type") == "row":
            continue
        if (p.get("datasource") or {}).get("uid") != DS_REF:
            problem("%s: datasource is not %s" % (where, DS_REF))
        targets = p.get("targets") or []
        if not targets:
            problem("%s: no queries" % where)
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or None in refs:
            problem("%s: refIds must be present and unique, got %r" % (where, refs))
        for t in targets:
            tw = "%s query %s" % (where, t.get("refId"))
            if (t.get("datasource") or {}).get("uid") != DS_REF:
                problem("%s: datasource is not %s" % (tw, DS_REF))
            expr = t.get("expr", "")
            nexpr += 1
            if not check_expr(tw, expr, metrics, used, t.get("legendFormat")):
                problem("%s: expression %r uses no fedrouter metric" % (tw, expr))
    if nexpr == 0:
        problem("%s: no queries at all" % path)
    return used


def check_prometheus_yml(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not re.search(r"^\s*metrics_path:\s*[\"']?/metrics[\"']?\s*(#.*)?$", text, re.M):
        problem("%s: no `metrics_path: /metrics`" % path)
    if not re.search(r"^\s*-?\s*job_name:\s*[\"']?fedrouter[\"']?\s*$", text, re.M):
        problem("%s: no job_name fedrouter" % path)
    if not re.search(r"^\s*-\s*[\"']?fedrouter:8080[\"']?\s*$", text, re.M):
        problem("%s: the target fedrouter:8080 is not listed" % path)
    if not re.search(r"^\s*scrape_interval:\s*15s\s*$", text, re.M):
        problem("%s: no scrape_interval: 15s" % path)
    if "\t" in text:
        problem("%s: tabs are not allowed in YAML indentation" % path)
    promtool = shutil.which("promtool")
    if promtool:
        r = subprocess.run([promtool, "check", "config", "--syntax-only", path],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            problem("%s: promtool check config failed:\n%s%s" % (path, r.stdout, r.stderr))


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "..", "..")
    doc = os.path.join(root, "docs", "metrics.md")
    dash = os.path.join(root, "deploy", "grafana-dashboard.json")
    prom = os.path.join(root, "deploy", "prometheus.yml")
    for p in (doc, dash, prom):
        if not os.path.isfile(p):
            print("check_deploy: missing %s" % p, file=sys.stderr)
            return 2

    with open(doc, encoding="utf-8") as f:
        metrics = parse_metric_table(f.read())
    if len(metrics) < 10:
        problem("docs/metrics.md: found only %d metrics in the table; did its format change?"
                % len(metrics))
    used = check_dashboard(dash, metrics)
    for name in sorted(set(metrics) - used) if used is not None else ():
        problem("%s: metric %s of docs/metrics.md is on no panel" % (dash, name))
    check_prometheus_yml(prom)

    for p in problems:
        print("FAIL: " + p)
    if problems:
        print("check_deploy: %d problem(s)" % len(problems))
        return 1
    print("check_deploy: OK (%d documented metrics, all on the dashboard; prometheus.yml "
          "scrapes /metrics)" % len(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
