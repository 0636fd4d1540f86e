#!/usr/bin/env python3
"""loadtest/plot/extract.py - loadgen JSON reports in, gnuplot data out.

    extract.py WORKDIR OUTDIR REPORT.json...

For each plot there is data for, writes WORKDIR/<plot>.dat files and
WORKDIR/<plot>.vars.gp (gnuplot variables: data file names, key titles,
bounds, ranges, the PNG path under OUTDIR), and prints "<plot>" on a line
of its own; plot.sh then runs loadtest/plot/<plot>.gp on each. Plots:

  soak-rss-fds       every soak report: samples [{t_s, rss_mib, fds}]
  scale-rss          every scale report with samples [{sandboxes, rss_mib}]
  scale-create-rate  scale reports' create_rate_vs_clusters and full
                     creates, when at least two cluster counts are known

Reports of other scenarios are skipped with a note on stderr. Exit 0, or 1
on an unreadable report or when there is nothing to plot.
"""
import json
import os
import sys

TARGET_MIB = 512           # the target: 500k sandboxes with router RSS <= 512 MiB
TARGET_SANDBOXES = 500000


def gq(s):
    """A gnuplot double-quoted string literal."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def num(v, default=None):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def thousands(n):
    return f"{n:,.0f}"


def machine_line(rep):
    m = rep.get("machine", {})
    parts = []
    if num(m.get("nproc")):
        parts.append(f"{m['nproc']} cpu")
    if num(m.get("total_memory_bytes")):
        parts.append(f"{m['total_memory_bytes'] / 2**30:.0f} GiB")
    if m.get("sysname"):
        parts.append(f"{m['sysname']} {m.get('release', '')}".strip())
    return ", ".join(parts)


def subtitle(reps):
    """The machine (when all ran on one) and the run's start or the count."""
    machines = {machine_line(r) for _, r in reps}
    when = f"run {reps[0][1].get('started_at', '?')}" if len(reps) == 1 else f"{len(reps)} runs"
    return f"{machines.pop()}, {when}" if len(machines) == 1 else when


def unique_labels(reps, label):
    """label(rep) per report, with the file name added where two collide."""
    labels = [label(r) for _, r in reps]
    return [lab if labels.count(lab) == 1 else f"{lab} ({os.path.basename(p)})"
            for lab, (p, _) in zip(labels, reps)]


def write_arrays(f, arrays):
    n = len(next(iter(arrays.values())))
    f.write(f"n = {n}\n")
    for name, vals in arrays.items():
        f.write(f"array {name}[{n}]\n")
        for i, v in enumerate(vals, 1):
            f.write(f"{name}[{i}] = {gq(v) if isinstance(v, str) else repr(float(v))}\n")


def soak(work, out, reps):
    arrays = {k: [] for k in ("dat", "title", "rss_bound", "fd_bound", "warmup_s", "load_s")}
    rss_max = fd_max = t_max = 0.0
    labels = unique_labels(reps, lambda r: "{:.0f} s, {} workers x batch {}".format(
        num(r["figures"].get("duration_s"), 0), r["parameters"].get("workers", "?"),
        r["parameters"].get("batch", "?")))
    for i, ((path, r), label) in enumerate(zip(reps, labels), 1):
        fig = r["figures"]
        dat = os.path.join(work, f"soak-{i}.dat")
        with open(dat, "w") as f:
            f.write("# t_s rss_mib fds\n")
            for s in fig["samples"]:
                t, rss, fds = num(s.get("t_s")), num(s.get("rss_mib")), num(s.get("fds"))
                if t is None or rss is None or fds is None or fds < 0:
                    continue
                f.write(f"{t} {rss} {fds}\n")
                rss_max, fd_max, t_max = max(rss_max, rss), max(fd_max, fds), max(t_max, t)
        rss_bound = num(fig.get("rss_mib", {}).get("bound"), 0)
        fd_bound = num(fig.get("fds", {}).get("bound"), 0)
        rss_max, fd_max = max(rss_max, rss_bound), max(fd_max, fd_bound)
        arrays["dat"].append(dat)
        arrays["title"].append(label)
        arrays["rss_bound"].append(rss_bound)
        arrays["fd_bound"].append(fd_bound)
        arrays["warmup_s"].append(num(r["parameters"].get("warmup_s"), 0))
        arrays["load_s"].append(num(fig.get("duration_s"), 0))
    with open(os.path.join(work, "soak-rss-fds.vars.gp"), "w") as f:
        f.write(f"out_png = {gq(os.path.join(out, 'soak-rss-fds.png'))}\n")
        f.write(f"subtitle = {gq(subtitle(reps))}\n")
        # headroom above the bound lines for the key
        f.write(f"rss_top = {max(rss_max * 1.4, 1.0)!r}\nfd_top = {max(fd_max * 1.4, 1.0)!r}\n")
        f.write(f"t_top = {max(t_max, 1.0)!r}\n")
        write_arrays(f, {"soak_" + k: v for k, v in arrays.items()})


def scale_label(r):
    fig = r["figures"]
    return "{} clusters, {} sandboxes".format(fig.get("clusters", "?"),
                                              thousands(num(fig.get("created"), 0)))


def scale_rss(work, out, reps):
    arrays = {k: [] for k in ("dat", "title", "after")}
    rss_max = x_max = 0.0
    for i, ((path, r), label) in enumerate(zip(reps, unique_labels(reps, scale_label)), 1):
        fig = r["figures"]
        pts = [(num(s.get("sandboxes")), num(s.get("rss_mib"))) for s in fig["samples"]]
        pts = [(x, y) for x, y in pts if x is not None and y is not None]
        if not pts:
            continue
        per = num(fig.get("router_rss_bytes_per_sandbox"))
        if per is None and pts[-1][0] > pts[0][0]:
            per = (pts[-1][1] - pts[0][1]) * 2**20 / (pts[-1][0] - pts[0][0])
        if per is not None:
            label += f": +{thousands(per)} bytes per sandbox"
            if per > 0 and pts[0][1] < TARGET_MIB:
                at = pts[0][0] + (TARGET_MIB - pts[0][1]) * 2**20 / per
                label += f" ({TARGET_MIB} MiB at ~{thousands(at / 1000)}k)"
        after = num(fig.get("router_rss_mib_after_terminate"), -1)
        dat = os.path.join(work, f"scale-rss-{i}.dat")
        with open(dat, "w") as f:
            f.write("# sandboxes rss_mib\n")
            for x, y in pts:
                f.write(f"{x} {y}\n")
            # index 1: the RSS once all of them were terminated (0 live)
            f.write(f"\n\n0 {after}\n")
        rss_max = max([rss_max, after] + [y for _, y in pts])
        x_max = max([x_max] + [x for x, _ in pts])
        arrays["dat"].append(dat)
        arrays["title"].append(label)
        arrays["after"].append(after)
    if not arrays["dat"]:
        return False
    # x in thousands once the runs are big enough to need it
    xdiv, xunit = (1000.0, "thousands; ") if x_max >= 20000 else (1.0, "")
    with open(os.path.join(work, "scale-rss.vars.gp"), "w") as f:
        f.write(f"out_png = {gq(os.path.join(out, 'scale-rss.png'))}\n")
        f.write(f"subtitle = {gq(subtitle(reps))}\n")
        f.write(f"target_mib = {TARGET_MIB}\n")
        f.write(f"target_title = {gq(f'target: {TARGET_MIB} MiB with {thousands(TARGET_SANDBOXES)} sandboxes')}\n")
        f.write(f"xdiv = {xdiv!r}\nxlabel_text = {gq(f'live sandboxes ({xunit}created so far)')}\n")
        f.write(f"y_top = {max(rss_max, TARGET_MIB) * 1.12!r}\n")
        write_arrays(f, {"scale_" + k: v for k, v in arrays.items()})
    return True


def scale_rate(work, out, reps):
    curves = []                 # (dat, title, [(clusters, creates/s)])
    full = []                   # (clusters, creates/s, created)
    ks = set()
    for i, ((path, r), label) in enumerate(zip(reps, unique_labels(reps, scale_label)), 1):
        fig = r["figures"]
        pts = [(num(p.get("clusters")), num(p.get("creates_per_s")))
               for p in fig.get("create_rate_vs_clusters") or []]
        pts = sorted((k, v) for k, v in pts if k is not None and v is not None)
        if pts:
            dat = os.path.join(work, f"scale-rate-curve-{i}.dat")
            with open(dat, "w") as f:
                f.write("# clusters creates_per_s\n")
                for k, v in pts:
                    f.write(f"{k} {v}\n")
            per = r["parameters"].get("curve_per_cluster", "?")
            title = f"curve: {thousands(per) if num(per) else per} sandboxes per cluster"
            if len(reps) > 1:
                title += f" ({label})"
            curves.append((dat, title, pts))
            ks.update(k for k, _ in pts)
        k, v = num(fig.get("clusters")), num(fig.get("creates_per_s"))
        if k is not None and v is not None:
            full.append((k, v, num(fig.get("created"), 0)))
            ks.add(k)
    if len(ks) < 2:
        return False
    full.sort()
    ns = {n for _, _, n in full}
    full_dat = os.path.join(work, "scale-rate-full.dat")
    with open(full_dat, "w") as f:
        f.write("# clusters creates_per_s created\n")
        for k, v, n in full:
            f.write(f"{k} {v} {n}\n")
    if len(ns) == 1:
        full_title = f"full create: {thousands(next(iter(ns)))} sandboxes over all clusters"
    else:
        full_title = "full create: SCALE_N sandboxes over all clusters (one point per run)"
    rate_max = max([v for _, v, _ in full] + [v for _, _, pts in curves for _, v in pts])
    # the ideal line starts from the first curve that has a 1-cluster point
    one = next((dict(pts)[1] for _, _, pts in curves if 1 in dict(pts)), 0)
    with open(os.path.join(work, "scale-create-rate.vars.gp"), "w") as f:
        f.write(f"out_png = {gq(os.path.join(out, 'scale-create-rate.png'))}\n")
        f.write(f"subtitle = {gq(subtitle(reps))}\n")
        f.write(f"full_dat = {gq(full_dat)}\nfull_title = {gq(full_title)}\n")
        # one line through the full creates when each is another cluster count
        ks_full = [k for k, _, _ in full]
        f.write(f"full_style = {gq('linespoints' if len(set(ks_full)) == len(ks_full) else 'points')}\n")
        f.write(f"one_cluster_rate = {float(one)!r}\n")
        f.write(f"k_top = {max(ks) * 1.08 + 0.5!r}\ny_top = {rate_max * 1.3!r}\n")
        f.write("set xtics (" + ", ".join(str(k) for k in sorted(ks)) + ")\n")
        if curves:
            write_arrays(f, {"curve_dat": [c[0] for c in curves], "curve_title": [c[1] for c in curves]})
        else:
            f.write("n = 0\n")
    return True


def main(argv):
    if len(argv) < 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    work, out, paths = argv[1], argv[2], argv[3:]
    by = {"soak": [], "scale": []}
    for p in paths:
        try:
            with open(p) as f:
                r = json.load(f)
        except (OSError, ValueError) as e:
            print(f"plot: cannot read {p}: {e}", file=sys.stderr)
            return 1
        sc = r.get("scenario")
        if sc in by and isinstance(r.get("figures"), dict):
            if sc == "soak" and not r["figures"].get("samples"):
                print(f"plot: {p}: soak report without samples; skipped", file=sys.stderr)
                continue
            by[sc].append((p, r))
        else:
            print(f"plot: {p}: scenario {sc!r} has no plot; skipped", file=sys.stderr)
    made = []
    if by["soak"]:
        soak(work, out, by["soak"])
        made.append("soak-rss-fds")
    with_samples = [(p, r) for p, r in by["scale"] if r["figures"].get("samples")]
    if len(with_samples) < len(by["scale"]):
        print("plot: scale report(s) without samples (older loadgen): no RSS curve for them", file=sys.stderr)
    if with_samples and scale_rss(work, out, with_samples):
        made.append("scale-rss")
    if by["scale"] and scale_rate(work, out, by["scale"]):
        made.append("scale-create-rate")
    elif by["scale"]:
        print("plot: scale: fewer than two cluster counts; no create-rate plot", file=sys.stderr)
    if not made:
        print("plot: nothing to plot (give scale or soak reports)", file=sys.stderr)
        return 1
    print("\n".join(made))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
