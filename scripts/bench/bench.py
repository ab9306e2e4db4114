#!/usr/bin/env python3
"""Overhead benchmark: the leak tracer against heaptrack and memray.

Started by scripts/bench/run.sh, which installs the peers and builds what is
needed first. Runs each workload in each configuration, interleaved (one run
of every configuration per round, the order rotated every round), and
reports medians. A configuration that fails is reported as failed; the rest
of the run goes on. The exit status is 1 when a run untraced or under this
tracer failed, 0 otherwise (a peer's failure is one of the findings).

Per run: wall time; CPU time (user + system of the run and of every
descendant it waited for, which a shared machine's other load disturbs less
than wall time); peak RSS of the largest single process (GNU time's %M,
getrusage of the waited-for tree, i.e. the max over processes, never summed); peak RSS of the
whole process tree (the sum over processes, sampled every 0.2 s: DataLoader
workers, heaptrack_interpret and the like count; shared pages count once per
process); the size of every file the run wrote; and the time the tool's own
report takes on that output.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(ROOT, "target/release/libtracer.so")
ANALYZER = os.path.join(ROOT, "target/release/analyzer")
VPY = os.path.join(ROOT, ".venv/bin/python")
TRAINER = os.path.join(ROOT, "demo-trainer/target/release/demo-trainer")
TORCH_LOOP = os.path.join(ROOT, "scripts/bench/torch_loop.py")
# The C workloads: the program each one runs, built from scripts/bench/<program>.c.
C_PROGRAMS = {"alloc": "alloc_heavy", "long": "long_run"}
# The PyTorch loop, with DataLoader workers, and without them ("torch-solo"):
# heaptrack hangs in the first forked worker, so the loop without workers is
# where it can be measured on a PyTorch job. "torch-sampled" is the loop with
# workers again, untraced against sampling only, for more rounds: sampling's
# overhead is within a few percent, where three rounds on a shared machine
# cannot tell it apart from the noise.
TORCH_WORKLOADS = ("torch", "torch-solo", "torch-sampled")
SAMPLING_ONLY = ("torch-sampled",)

# Workload sizes: (full, quick). Full sizes aim at roughly 5-15 s untraced on
# a 2-core machine.
SIZES = {
    "alloc": {"full": ["2", "1000000", "24"], "quick": ["2", "20000", "24"]},
    "long": {"full": ["2000", "512"], "quick": ["20", "64"]},
    "torch": {"full": ["--epochs", "6", "--steps", "120"], "quick": ["--epochs", "4", "--steps", "6"]},
    "torch-solo": {"full": ["--epochs", "6", "--steps", "120"], "quick": ["--epochs", "4", "--steps", "6"]},
    "demo": {"full": ["--epochs", "6", "--steps", "100"], "quick": ["--epochs", "4", "--steps", "8"]},
}
SIZES["torch-sampled"] = SIZES["torch"]
COMMON = {
    "torch": ["--batch-size", "64", "--workers", "2", "--accumulate", "4", "--threads", "1"],
    "torch-solo": ["--batch-size", "64", "--workers", "0", "--accumulate", "4", "--threads", "1"],
    "demo": ["--batch-size", "32", "--workers", "2", "--accumulate", "4", "--threads", "1"],
}
COMMON["torch-sampled"] = COMMON["torch"]
REPS = {"alloc": 5, "torch": 3, "torch-solo": 3, "torch-sampled": 10, "demo": 3, "long": 3}
TITLES = {
    "alloc": "alloc_heavy (C, {} threads x {} malloc/free pairs, depth {}, no frame pointers)",
    "long": "long_run (C, {} epochs x {} allocations over 262,144 distinct stacks of 40 frames, freed an epoch "
            "later, a 12 KiB/epoch leak; for the analyzer's scale)",
    "torch": "PyTorch CPU training loop (scripts/bench/torch_loop.py {}; DataLoader workers, accumulation)",
    "torch-solo": "PyTorch CPU training loop without DataLoader workers (scripts/bench/torch_loop.py {}; "
                  "the batches loaded in the training process, where heaptrack finishes)",
    "torch-sampled": "PyTorch CPU training loop, untraced against sampling only (scripts/bench/torch_loop.py {}; "
                     "more rounds, for sampling's few percent)",
    "demo": "demo-trainer (Rust/tch, {})",
}


# --------------------------------------------------------------------------- measuring

def tree_usage(root_pid):
    """(sum of VmRSS in KiB, sum of user+system CPU seconds) over root_pid and
    all its descendants."""
    parent = {}
    cpu = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2:].split()
            parent[int(name)] = int(fields[1])
            cpu[int(name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            continue
    members = {root_pid}
    changed = True
    while changed:
        changed = False
        for pid, ppid in parent.items():
            if ppid in members and pid not in members:
                members.add(pid)
                changed = True
    rss = 0
    for pid in members:
        try:
            with open(f"/proc/{pid}/statm") as f:
                rss += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
        except (OSError, ValueError, IndexError):
            pass
    return rss, sum(cpu.get(pid, 0.0) for pid in members)


HANG_WINDOW_S = 60  # a tree that uses under 1% of a CPU for this long is hung


def measure(cmd, env, cwd, log, timeout):
    """Runs cmd; returns dict(rc, wall_s, cpu_s, maxrss_mib, tree_rss_mib, killed).
    The run is killed (killed: "timeout" or "hung") when it exceeds timeout
    seconds or when its whole process tree stops using CPU (a deadlock)."""
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        # GNU time measures the peak RSS: the ru_maxrss of a process forked
        # straight from this (large) Python would start at Python's own size.
        rssfile = log + ".maxrss"
        start = time.monotonic()
        try:
            proc = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", rssfile] + cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            out.write(f"cannot start: {e}\n".encode())
            return {"rc": 127, "wall_s": 0.0, "cpu_s": 0.0, "maxrss_mib": 0.0, "tree_rss_mib": 0.0, "killed": None}
        peak = [0]
        killed = [None]
        done = threading.Event()

        def kill(why):
            killed[0] = why
            try:
                os.killpg(proc.pid, 9)
            except OSError:
                pass

        def sample():
            history = []  # (time, tree cpu seconds)
            while not done.wait(0.2):
                rss, cpu = tree_usage(proc.pid)
                peak[0] = max(peak[0], rss)
                now = time.monotonic()
                history.append((now, cpu))
                while history and history[0][0] < now - HANG_WINDOW_S:
                    history.pop(0)
                if now - start > timeout:
                    kill("timeout")
                elif now - start > HANG_WINDOW_S and history[-1][1] - history[0][1] < 0.01 * HANG_WINDOW_S:
                    kill("hung")
                if killed[0]:
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
        done.set()
        sampler.join()
        if killed[0] is None:
            try:
                os.killpg(proc.pid, 9)  # leftovers of the run (a daemonized helper)
            except OSError:
                pass
        rc = os.waitstatus_to_exitcode(status)
        found = re.findall(r"^(\d+)$", read(rssfile), re.M)
        maxrss = int(found[-1]) if found else 0
        os.unlink(rssfile) if os.path.exists(rssfile) else None
        out.write(f"[rc {rc}, {wall:.3f} s, maxrss {maxrss} KiB, killed {killed[0]}]\n".encode())
    # GNU time's rusage: the run and every descendant it waited for
    # (DataLoader workers, heaptrack_interpret, memray's reader).
    cpu = usage.ru_utime + usage.ru_stime
    return {"rc": rc, "wall_s": wall, "cpu_s": cpu, "maxrss_mib": maxrss / 1024,
            "tree_rss_mib": max(peak[0], maxrss) / 1024, "killed": killed[0]}


def dir_bytes(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def tail(path, n=400):
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode(errors="replace")
    except OSError:
        return ""


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


# --------------------------------------------------------------------------- configurations

class Config:
    """name, tool, how to wrap a command, what its run must leave behind and how
    the tool reports on it."""

    def __init__(self, name, wrap, check=None, analyze=None, available=True, why=""):
        self.name, self.wrap, self.check, self.analyze = name, wrap, check, analyze
        self.available, self.why = available, why


def tracer_env(extra):
    def wrap(cmd, env, rundir):
        # Preloaded into the program itself, not into GNU time (which would
        # then be the first traced process and write trace.bin): env sets
        # LD_PRELOAD and execs the program in the same process.
        settings = dict(TRACER_OUTPUT=os.path.join(rundir, "trace.bin"), **extra)
        return ["env", f"LD_PRELOAD={LIB}"] + [f"{k}={v}" for k, v in settings.items()] + cmd, env
    return wrap


def tracer_check(min_epochs, sampling=None):
    """sampling: None (every allocation), "whole" (TRACER_SAMPLE_BYTES) or
    "warm-up" (TRACER_WARMUP_SAMPLE_BYTES, whose warm-up must have ended)."""
    def check(rundir, log):
        trace = os.path.join(rundir, "trace.bin")
        if not os.path.exists(trace):
            return "no trace.bin written"
        r = subprocess.run([ANALYZER, "report", trace, "--json"], capture_output=True, text=True)
        if r.returncode != 0:
            return f"analyzer --json failed: {r.stderr.strip()[-200:]}"
        try:
            j = json.loads(r.stdout)
        except ValueError:
            return "analyzer --json printed no JSON"
        exe = os.path.basename(j.get("process", {}).get("exe", ""))
        if exe in ("time", "env"):
            return f"the first traced process is {exe}, not the program"
        epochs = len(j.get("epochs", []))
        if epochs < min_epochs:
            return f"trace has {epochs} epochs, expected at least {min_epochs}"
        if j.get("trace_end") != "complete":
            return f"trace end: {j.get('trace_end')}"
        setting = j.get("process", {}).get("settings", {}).get("sampling", "")
        if (sampling is not None) != setting.startswith("Poisson by bytes"):
            return f"the trace's sampling setting is not the one asked for: {setting!r}"
        closed = any(e.get("cause") != "exit" for e in j.get("epochs", []))
        ended = any("the warm-up ended" in n.get("text", "") for n in j.get("notes", []))
        if sampling == "warm-up" and closed and not ended:
            return "the warm-up never ended: the whole run was sampled"
        children = [f for f in os.listdir(rundir) if re.fullmatch(r"trace\.bin\.\d+(\.\d+)?", f)]
        if children:
            empty = [f for f in children if os.path.getsize(os.path.join(rundir, f)) <= 64]
            NOTES.setdefault(log, []).append(
                f"{len(children)} child traces (forked workers), {len(empty)} of them empty (header only)")
        return None
    return check


NOTES = {}  # run log -> notes for the table's footnotes


def tracer_analyze(rundir):
    return [ANALYZER, "report", os.path.join(rundir, "trace.bin")]


def heaptrack_wrap(cmd, env, rundir):
    return ["heaptrack", "-o", os.path.join(rundir, "heaptrack")] + cmd, env


def heaptrack_file(rundir):
    files = sorted(f for f in os.listdir(rundir) if f.startswith("heaptrack") and f.endswith((".zst", ".gz")))
    return os.path.join(rundir, files[0]) if files else None


def heaptrack_check(rundir, log):
    f = heaptrack_file(rundir)
    if not f:
        return "no heaptrack output file"
    if os.path.getsize(f) < 1000:
        return f"heaptrack output is only {os.path.getsize(f)} bytes"
    return None


def heaptrack_analyze(rundir):
    return ["heaptrack_print", "--print-leaks", "1", heaptrack_file(rundir) or "missing"]


def heaptrack_report_check(stdout_path):
    text = read(stdout_path)
    m = re.search(r"(\d+) calls to allocation functions", text)
    if not m or int(m.group(1)) == 0:
        return "heaptrack_print found no allocations"
    return None


def memray_wrap(native):
    def wrap(cmd, env, rundir):
        # cmd is [python, script, args...]
        flags = ["--follow-fork", "-q"] + (["--native"] if native else [])
        return [cmd[0], "-m", "memray", "run"] + flags + ["-o", os.path.join(rundir, "memray.bin")] + cmd[1:], env
    return wrap


def memray_check(rundir, log):
    f = os.path.join(rundir, "memray.bin")
    if not os.path.exists(f):
        return "no memray.bin written"
    if os.path.getsize(f) < 1000:
        return f"memray.bin is only {os.path.getsize(f)} bytes"
    return None


def memray_analyze(rundir):
    return [VPY, "-m", "memray", "flamegraph", "--leaks", "-f", "-o",
            os.path.join(os.path.dirname(rundir), os.path.basename(rundir) + ".memray-leaks.html"),
            os.path.join(rundir, "memray.bin")]


def sample_rates(text):
    """--sample-bytes: comma-separated positive byte counts, each a number
    of bytes or, as TRACER_SAMPLE_BYTES takes them, with k, m or g."""
    scales = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}
    rates = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(\d+)([kmg]?)", part.lower())
        if not match:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not a byte count: give a number of bytes, or with k, m or g (e.g. 512k)")
        rates.append(int(match.group(1)) * scales[match.group(2)])
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more byte counts above 0")
    return rates


def rate_label(n):
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def configs_for(workload, args, known):
    """known: the sampling variables libtracer.so knows."""
    min_epochs = (1 if args.quick else 2) if workload == "alloc" else 4
    # Slices short enough for a sampled run of a tenth of a second to have two.
    extra = {"TRACER_EPOCH_SECONDS": "0.02"} if workload == "alloc" else {}
    untraced = Config("untraced", lambda c, e, d: (c, e))
    sampling = [Config(f"tracer, sampling {rate_label(rate)}",
                       tracer_env(dict(extra, TRACER_SAMPLE_BYTES=str(rate))),
                       tracer_check(min_epochs, "whole"), tracer_analyze, available="TRACER_SAMPLE_BYTES" in known,
                       why="not available (libtracer.so has no TRACER_SAMPLE_BYTES)")
                for rate in args.sample_bytes]
    if workload in SAMPLING_ONLY:
        return [untraced] + sampling
    cs = [
        untraced,
        Config("tracer, full capture", tracer_env(dict(extra, TRACER_WARMUP_SAMPLE_BYTES="0")),
               tracer_check(min_epochs), tracer_analyze),
        # What a plain LD_PRELOAD does: the warm-up sampled, every later allocation recorded.
        Config("tracer (default)", tracer_env(extra), tracer_check(min_epochs, "warm-up"), tracer_analyze,
               available="TRACER_WARMUP_SAMPLE_BYTES" in known,
               why="not available (libtracer.so records every allocation by default)"),
    ]
    if workload in TORCH_WORKLOADS:
        # The default with Python's small objects traced, sampled: what their
        # hooks cost on a job that makes objects by the million.
        cs.append(Config("tracer (default), Python objects", tracer_env(dict(extra, TRACER_PYTHON_OBJECTS="1")),
                         tracer_check(min_epochs, "warm-up"), tracer_analyze,
                         available="TRACER_PYTHON_OBJECTS" in known,
                         why="not available (libtracer.so has no TRACER_PYTHON_OBJECTS)"))
    cs += [Config(f"tracer, warm-up sampled at {rate_label(rate)}",
                  tracer_env(dict(extra, TRACER_WARMUP_SAMPLE_BYTES=str(rate))),
                  tracer_check(min_epochs, "warm-up"), tracer_analyze, available="TRACER_WARMUP_SAMPLE_BYTES" in known,
                  why="not available (libtracer.so has no TRACER_WARMUP_SAMPLE_BYTES)")
           for rate in args.warm_up_sample_bytes]
    cs += sampling
    cs += [
        Config("heaptrack", heaptrack_wrap, heaptrack_check, heaptrack_analyze,
               available=shutil.which("heaptrack") is not None, why="heaptrack not installed"),
    ]
    if workload in TORCH_WORKLOADS:
        have_memray = subprocess.run([VPY, "-c", "import memray"], capture_output=True).returncode == 0
        cs += [Config("memray --follow-fork", memray_wrap(False), memray_check, memray_analyze,
                      available=have_memray, why="memray not installed"),
               Config("memray --follow-fork --native", memray_wrap(True), memray_check, memray_analyze,
                      available=have_memray, why="memray not installed")]
    return cs


def workload_cmd(workload, args, bindir):
    size = SIZES[workload]["quick" if args.quick else "full"]
    if workload in C_PROGRAMS:
        return [os.path.join(bindir, C_PROGRAMS[workload])] + size, TITLES[workload].format(*size)
    if workload in TORCH_WORKLOADS:
        a = size + COMMON[workload]
        return [VPY, TORCH_LOOP] + a, TITLES[workload].format(" ".join(a))
    a = size + COMMON["demo"]
    return [TRAINER] + a, TITLES["demo"].format(" ".join(a))


def workload_check(workload, log):
    text = read(log)
    if workload in TORCH_WORKLOADS and "torch_loop: done" not in text:
        return "the training loop did not finish"
    if workload == "demo" and "rss after epoch 1" not in text:
        return "demo-trainer did not finish"
    if workload == "long" and "long_run: " not in text:
        return "long_run did not finish"
    return None


# --------------------------------------------------------------------------- running

def run_workload(workload, args, bindir, outdir, known):
    cmd, title = workload_cmd(workload, args, bindir)
    configs = configs_for(workload, args, known)
    reps = args.reps or (1 if args.quick else REPS[workload])
    base_env = dict(os.environ)
    for k in [k for k in base_env if k.startswith("TRACER_") or k == "LD_PRELOAD"]:
        del base_env[k]
    results = {c.name: [] for c in configs}
    active = [c for c in configs if c.available]
    wdir = os.path.join(outdir, "runs", workload)
    shutil.rmtree(wdir, ignore_errors=True)
    print(f"\n== {title}: {len(active)} configurations x {reps} rounds", flush=True)
    for rep in range(reps):
        order = active[rep % len(active):] + active[:rep % len(active)]
        for c in order:
            if any(r.get("killed") for r in results[c.name]):
                print(f"  [{rep + 1}/{reps}] {c.name:32s} skipped: it hung or timed out in an earlier round", flush=True)
                continue
            slug = re.sub(r"[^a-z0-9]+", "-", c.name.lower()).strip("-")
            rundir = os.path.join(wdir, f"{slug}.{rep + 1}")
            os.makedirs(rundir)
            log = rundir + ".log"
            wcmd, env = c.wrap(list(cmd), dict(base_env), rundir)
            base = [r["wall_s"] for r in results["untraced"] if not r["error"]]
            timeout = max(args.timeout, 40 * statistics.median(base)) if base else 3 * args.timeout
            m = measure(wcmd, env, rundir, log, timeout)
            m["files_bytes"] = dir_bytes(rundir)
            err = None
            if m["killed"] == "hung":
                err = f"hung: no CPU used for {HANG_WINDOW_S} s, killed after {m['wall_s']:.0f} s"
            elif m["killed"] == "timeout":
                err = f"timed out after {m['wall_s']:.0f} s"
            elif m["rc"] != 0:
                lines = [l for l in tail(log, 600).strip().splitlines() if not l.startswith("[rc ")]
                last = (lines or [""])[-1][:120]
                err = f"exit status {m['rc']}: {last}"
            err = err or workload_check(workload, log) or (c.check and c.check(rundir, log))
            steady = re.search(r"epochs after the first in ([0-9.]+)s", read(log)) if workload in TORCH_WORKLOADS else None
            if steady:
                m["steady_s"] = float(steady.group(1))
            if not err and c.analyze:
                alog = rundir + ".report.txt"
                a = measure(c.analyze(rundir), dict(base_env), os.path.dirname(rundir), alog, 3 * args.timeout)
                m["analysis_s"], m["analysis_rss_mib"] = a["wall_s"], a["maxrss_mib"]
                if a["rc"] != 0:
                    err = f"report failed (exit {a['rc']})"
                elif c.name == "heaptrack":
                    err = heaptrack_report_check(alog)
            m["error"] = err
            m["round"] = rep
            m["notes"] = NOTES.pop(log, [])
            results[c.name].append(m)
            status = "ok" if not err else f"FAILED: {err}"
            extra = f", report {m['analysis_s']:.2f} s" if "analysis_s" in m else ""
            print(f"  [{rep + 1}/{reps}] {c.name:32s} {m['wall_s']:8.2f} s  cpu {m['cpu_s']:7.2f} s  rss {m['maxrss_mib']:7.1f} MiB"
                  f"  tree {m['tree_rss_mib']:7.1f} MiB  files {m['files_bytes'] / 2**20:8.2f} MiB{extra}  {status}",
                  flush=True)
            if not args.keep and rep + 1 < reps:
                shutil.rmtree(rundir, ignore_errors=True)  # the last round's outputs stay for inspection
    return {"workload": workload, "title": title, "command": cmd, "reps": reps,
            "configs": [{"name": c.name, "available": c.available, "why": c.why, "runs": results[c.name]}
                        for c in configs]}


# --------------------------------------------------------------------------- reporting

def fmt_bytes(n):
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def med(runs, key):
    vals = [r[key] for r in runs if key in r]
    return statistics.median(vals) if vals else None


def round_ratios(runs, base_runs, key):
    """Each round's ratio to that round's untraced run: the machine's speed
    drifts by a third within a run of the harness, and the two runs of one
    round are the nearest in time."""
    base = {r["round"]: r[key] for r in base_runs if key in r and r.get(key)}
    return [r[key] / base[r["round"]] for r in runs if key in r and r.get("round") in base]


def paired_ratio(runs, base_runs, key):
    """The median over rounds of each round's ratio to untraced."""
    ratios = round_ratios(runs, base_runs, key)
    return statistics.median(ratios) if ratios else None


def ratio_cell(runs, base_runs, key):
    """The median ratio, with the first and third quartiles of the rounds'
    ratios when there are four rounds or more: a target a few percent above
    untraced is met only when the rounds say so, not by one good draw."""
    ratios = round_ratios(runs, base_runs, key)
    if not ratios:
        return "n/a"
    cell = f"{statistics.median(ratios):.2f}x"
    if len(ratios) >= 4:
        first, _, third = statistics.quantiles(ratios, n=4)
        cell += f" ({first:.2f}-{third:.2f})"
    return cell


def table(w):
    steady = any("steady_s" in r for c in w["configs"] for r in c["runs"])
    lines = [f"**{w['title']}**, {w['reps']} rounds, medians", "",
             "| configuration | wall time | vs untraced | CPU time (vs untraced) | "
             + ("epochs after the first (vs untraced) | " if steady else "")
             + "peak RSS, largest process | peak RSS, process tree | output files | report time (peak RSS) |",
             "|---|---:|---:|---:|" + ("---:|" if steady else "") + "---:|---:|---:|---:|"]
    untraced = [r for c in w["configs"] if c["name"] == "untraced" for r in c["runs"] if not r["error"]]
    for c in w["configs"]:
        name = c["name"]
        if not c["available"]:
            lines.append(f"| {name} | {c['why']} |" + " |" * (6 + steady))
            continue
        ok = [r for r in c["runs"] if not r["error"]]
        failed = [r for r in c["runs"] if r["error"]]
        if not ok:
            reason = failed[0]["error"] if failed else "not run"
            lines.append(f"| {name} | failed: {reason.replace('|', '/')[:160]} |" + " |" * (6 + steady))
            continue
        wall = med(ok, "wall_s")
        walls = [r["wall_s"] for r in ok]
        spread = f" ({min(walls):.2f}-{max(walls):.2f})" if len(walls) > 1 else ""
        ratio = "1.00x" if name == "untraced" else ratio_cell(ok, untraced, "wall_s")
        files = fmt_bytes(int(med(ok, "files_bytes"))) if name != "untraced" else "-"
        rep = med(ok, "analysis_s")
        report = f"{rep:.2f} s ({med(ok, 'analysis_rss_mib'):.0f} MiB)" if rep is not None else "-"
        note = f" [{len(failed)} of {len(c['runs'])} runs failed: {failed[0]['error'][:80]}]" if failed else ""
        steady_cell = ""
        if steady:
            s, s_ratio = med(ok, "steady_s"), paired_ratio(ok, untraced, "steady_s")
            steady_cell = f"{s:.2f} s ({s_ratio:.2f}x) | " if s is not None and s_ratio is not None else "- | "
        cpu, cpu_ratio = med(ok, "cpu_s"), paired_ratio(ok, untraced, "cpu_s")
        cpu_cell = f"{cpu:.2f} s ({cpu_ratio:.2f}x)" if cpu is not None and cpu_ratio is not None else "-"
        lines.append(f"| {name}{note} | {wall:.2f} s{spread} | {ratio} | {cpu_cell} | {steady_cell}{med(ok, 'maxrss_mib'):.0f} MiB | "
                     f"{med(ok, 'tree_rss_mib'):.0f} MiB | {files} | {report} |")
    notes = []
    for c in w["configs"]:
        for n in sorted({n for r in c["runs"] for n in r.get("notes", [])}):
            notes.append(f"- {c['name']}: {n}")
        skipped = w["reps"] - len(c["runs"])
        if c["available"] and c["runs"] and skipped > 0:
            notes.append(f"- {c['name']}: {skipped} later round(s) skipped after it hung or timed out")
    if notes:
        lines += [""] + notes
    return "\n".join(lines)


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, cwd=ROOT).stdout.strip()
    except OSError:
        return ""


def environment():
    model = sh("lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1")
    mem = sh("free -g | awk '/^Mem:/ {print $2}'")
    rev = sh("git rev-parse --short HEAD")
    dirty = " (working tree has uncommitted changes)" if sh("git status --porcelain --untracked-files=no") else ""
    heaptrack = sh("heaptrack --version 2>&1 | head -1") or "not installed"
    memray = sh(f"{VPY} -c 'import memray; print(memray.__version__)' 2>/dev/null") or "not installed"
    torch = sh(f"{VPY} -c 'import torch; print(torch.__version__)' 2>/dev/null") or "not installed"
    py = sh(f"{VPY} --version 2>&1")
    return {"machine": f"{sh('nproc')} CPUs ({model}), {mem} GiB memory, {platform.release()}",
            "versions": f"tracer {rev}{dirty}; {heaptrack}; memray {memray}; torch {torch}; {py}; {sh('rustc --version')}"}


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    p = argparse.ArgumentParser(description="overhead benchmark: tracer, heaptrack, memray")
    p.add_argument("--workloads", default="alloc,torch,torch-solo,torch-sampled,demo,long",
                   help="comma-separated: alloc, torch, torch-solo (the loop without DataLoader workers), "
                        "torch-sampled (the loop untraced and sampled only), demo, long")
    p.add_argument("--reps", type=int, default=0,
                   help="rounds per workload (default: 5 alloc, 10 torch-sampled, 3 others)")
    p.add_argument("--quick", action="store_true", help="smoke run: tiny sizes, one round")
    p.add_argument("--sample-bytes", type=sample_rates, default="64k,512k",
                   help="TRACER_SAMPLE_BYTES of the sampling configurations, comma-separated (one configuration each; bytes, or with k, m or g)")
    p.add_argument("--warm-up-sample-bytes", type=sample_rates, default=[],
                   help="TRACER_WARMUP_SAMPLE_BYTES of extra warm-up sampling configurations beside the default's "
                        "(64 KiB), comma-separated")
    p.add_argument("--timeout", type=float, default=300,
                   help="a run is killed after max(this, 40x the untraced median) seconds, or when it hangs")
    p.add_argument("--out", default=os.path.join(ROOT, "out/bench"),
                   help="where the results and each run's files go (default: out/bench)")
    p.add_argument("--keep", action="store_true", help="keep every round's output files, not only the last")
    p.add_argument("--strict", action="store_true",
                   help="fail (exit 1) when any configuration is unavailable or any run fails, the peers' too "
                        "(the test suite's smoke run)")
    args = p.parse_args()
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for w in workloads:
        if w not in SIZES:
            p.error(f"unknown workload {w!r}")
    # The runs start in folders of their own: a relative path would name
    # another place from there.
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    bindir = os.path.join(args.out, "bin")
    os.makedirs(bindir, exist_ok=True)
    for program in C_PROGRAMS.values():
        subprocess.run(["cc", "-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", os.path.join(bindir, program),
                        os.path.join(ROOT, "scripts/bench", program + ".c"), "-ldl"], check=True)
    with open(LIB, "rb") as f:
        lib = f.read()
    known = {var for var in ("TRACER_SAMPLE_BYTES", "TRACER_WARMUP_SAMPLE_BYTES", "TRACER_PYTHON_OBJECTS")
             if var.encode() in lib}

    env = environment()
    started = datetime.datetime.now().astimezone()
    load_before = loadavg()
    loads = []
    stop = threading.Event()

    def watch_load():
        while not stop.wait(30):
            loads.append(float(loadavg().split()[0]))

    threading.Thread(target=watch_load, daemon=True).start()
    print(f"bench: {env['machine']}\nbench: {env['versions']}\nbench: load average {load_before}", flush=True)
    results = [run_workload(w, args, bindir, args.out, known) for w in workloads]
    stop.set()
    load_after = loadavg()
    if loads:
        load_note = (f"1-minute load average {load_before.split()[0]} at the start, {load_after.split()[0]} at the end, "
                     f"{statistics.median(loads):.2f} median (max {max(loads):.2f}) sampled every 30 s")
    else:
        load_note = f"load average {load_before} at the start, {load_after} at the end"

    md = [f"# Benchmark{' (quick smoke run, not representative)' if args.quick else ''}", "",
          f"- date: {started.strftime('%Y-%m-%d %H:%M %Z')}",
          f"- machine: {env['machine']}; {load_note}",
          f"- versions: {env['versions']}",
          "- runs are interleaved (one run of every configuration per round, order rotated each round); "
          "the figures are medians over the successful runs, wall-time ranges in parentheses; "
          "a ratio to untraced is the median over rounds of each round's ratio to that round's untraced run, "
          "with, from four rounds on, the first and third quartiles of those ratios in parentheses",
          "- CPU time: user + system time of the run and of every descendant it waited for (GNU time's rusage), "
          "all of a tool's helper processes included",
          "- peak RSS, largest process: GNU time's %M (getrusage of the waited-for process tree: the max over its processes, not a sum); "
          "process tree: the sum of RSS over the process and all descendants, sampled every 0.2 s "
          "(DataLoader workers, heaptrack_interpret and memray's forked children included)",
          "- output files: everything the run wrote (tracer: trace.bin plus one trace.bin.<pid> per forked worker; "
          "heaptrack: heaptrack.*.zst; memray: memray.bin plus memray.bin.<pid> per child)",
          "- report: tracer `analyzer report trace.bin` (text report + leak flamegraph); heaptrack "
          "`heaptrack_print --print-leaks 1 FILE`; memray `memray flamegraph --leaks memray.bin`; "
          "each on the main process's file",
          "- tracer on alloc_heavy (which never calls tracer_mark): TRACER_EPOCH_SECONDS=0.02 for time-slice epochs; "
          "on the training jobs the epochs are the programs' tracer_mark calls",
          ""]
    for w in results:
        md += [table(w), ""]
    text = "\n".join(md)
    print("\n" + text)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"date": started.isoformat(), "environment": env, "load": load_note, "results": results}, f, indent=1)
    print(f"bench: wrote {os.path.join(args.out, 'results.md')} and results.json", flush=True)
    # A peer that fails (heaptrack hangs on the forked DataLoader workers)
    # is a finding of the table; a failed run untraced or under this tracer
    # means the measurement itself is broken.
    ours = lambda c: args.strict or c["name"] == "untraced" or c["name"].startswith("tracer")
    failed = [f"{w['workload']}: {c['name']}: {r['error']}" for w in results for c in w["configs"] for r in c["runs"]
              if r["error"] and ours(c)]
    if args.strict:
        failed += [f"{w['workload']}: {c['name']}: {c['why'] if not c['available'] else 'not run'}"
                   for w in results for c in w["configs"] if not c["available"] or not c["runs"]]
    for failure in failed:
        print(f"bench: failed: {failure}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
