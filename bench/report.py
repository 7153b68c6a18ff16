#!/usr/bin/env python3
"""Writes bench/RESULTS.md (and the PNG plots, when gnuplot is installed)
from what bench/run.sh measured, and the README's figures from it (the block
between the README's bench/RESULTS.md markers; internal/docs checks that the
two agree).  Usage: report.py RAWDIR BENCHDIR [OUTDIR]

With OUTDIR (a QUICK run), RESULTS.md and the plots go there and the README
is left alone."""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

RAW, BENCH = sys.argv[1], sys.argv[2]
OUT = sys.argv[3] if len(sys.argv) > 3 else BENCH
PUBLISHED = os.path.realpath(OUT) == os.path.realpath(BENCH)
COLS = ["wall", "user", "sys", "maxrss", "rchar", "wchar", "read_bytes", "write_bytes", "exit"]


def load_runs():
    runs = {}
    with open(os.path.join(RAW, "runs.tsv")) as f:
        for line in f:
            case, tool, run, *vals = line.rstrip("\n").split("\t")
            rec = dict(zip(COLS, map(float, vals)))
            runs.setdefault((case, tool), []).append(rec)
    return runs


RUNS = load_runs()
ENV = dict(l.rstrip("\n").split("=", 1) for l in open(os.path.join(RAW, "machine.env")) if "=" in l)
TREES = {}
if os.path.exists(os.path.join(RAW, "trees.tsv")):
    for l in open(os.path.join(RAW, "trees.tsv")):
        c, n, b = l.split()
        TREES[c] = (int(n), int(b))
SIZES = {}
if os.path.exists(os.path.join(RAW, "sizes.tsv")):
    for l in open(os.path.join(RAW, "sizes.tsv")):
        c, b, k = l.split()
        SIZES[c] = (int(b), int(k) * 1024)


def med(case, tool, col="wall"):
    rs = RUNS.get((case, tool))
    return statistics.median(r[col] for r in rs) if rs else None


def cpumed(case, tool):
    rs = RUNS.get((case, tool))
    return statistics.median(r["user"] + r["sys"] for r in rs) if rs else None


def peak(case, tool, col="maxrss"):
    rs = RUNS.get((case, tool))
    return max(r[col] for r in rs) if rs else None


def nruns(case, tool):
    return len(RUNS.get((case, tool), []))


def fs(x):  # seconds
    if x is None:
        return "–"
    if x < 1:
        return f"{x * 1000:.0f} ms" if x >= 0.01 else f"{x * 1000:.1f} ms"
    return f"{x:.2f} s" if x < 100 else f"{x:.0f} s"


def fb(x):  # bytes
    if x is None:
        return "–"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if x >= div:
            return f"{x / div:.1f} {unit}"
    return f"{x:.0f} B"


def fr(a, b):
    return f"**{b / a:.0f}×**" if a and b else "–"


out = []
w = out.append

w("# cudapatch benchmarks\n")
w("Written by `bash bench/run.sh` (one command; it builds what it needs and writes this file). "
  "Do not edit by hand: the section *Reading the numbers* comes from `bench/README.md`.\n")
w("## Machine\n")
w("| | |\n| --- | --- |")
for k, label in [("date", "date"), ("cpu", "CPU"), ("cores", "cores"), ("mem", "memory"), ("os", "OS"),
                 ("kernel", "kernel"), ("fs", "filesystem of the work dir"), ("go", "Go"),
                 ("patchelf", "patchelf"), ("commit", "cudapatch commit"),
                 ("load_start", "load average at start (1, 5, 15 min)"), ("load_end", "load average at end"),
                 ("runs", "runs per point")]:
    w(f"| {label} | {ENV.get(k, '?')} |")
w("")
w("""## How it was measured

- **cudapatch** is the main job as a Nix build runs it: `cudapatch --search … --ignore-missing … PATHS`
  with `NIX_BINTOOLS` pointing at the corpus's bintools (so the interpreter of executables is set),
  default `--jobs` (all cores), log lines to a file.
- **the nixpkgs way** is `bench/nixpkgs-way.sh`: for each ELF file cudapatch patches,
  `patchelf --set-interpreter` (executables), `patchelf --set-rpath <the resolved directories>`
  (when there are any; the directories are those of cudapatch's `--json` report minus the driver
  link, so both do the same work), then `patchelf --print-rpath` and
  `patchelf --set-rpath /run/opengl-driver/lib:<old>` (addDriverRunpath). It leaves out Python
  start-up, pyelftools parsing of every file and the `readelf` call of autoFixElfFiles, so the
  real hooks are slower than this baseline.
- Every run starts from the same pristine copy (`rm -rf`, `cp -a`, `sync`, outside the timing); the
  two tools alternate, and which goes first alternates too. The page cache is warm for both, and
  nothing is fsynced by either tool (as in a Nix build).
- `bench/measure.go` runs each command: **wall** is the monotonic clock around fork/exec/wait;
  **peak RSS** is wait4's `ru_maxrss` (the largest single process, children included, as
  `/usr/bin/time -v` reports); **bytes written** is `wchar` from `/proc/self/io` of the wrapper
  (bytes passed to `write`/`pwrite`, counted for every reaped child), and **pages dirtied** is
  `write_bytes` (4 KiB per page touched, what writeback will have to flush). Medians over the runs;
  RSS and bytes are the maximum over the runs.
""")

# ---- headline ----------------------------------------------------------
w("## Headline\n")
HEAD = ["case", "files", "bytes", "runs", "cudapatch", "the nixpkgs way", "ratio", "peak RSS cudapatch",
        "peak RSS nixpkgs", "written cudapatch", "written nixpkgs", "pages dirtied cudapatch",
        "pages dirtied nixpkgs"]
labels = {"corpus": "CUDA 11.8 corpus", "small": "this machine's /usr/lib + /usr/bin"}


def headline(case, label, files, size):
    a, b = med(case, "cudapatch"), med(case, "nixpkgs")
    return dict(zip(HEAD, [
        label, str(files), fb(size), str(nruns(case, "cudapatch")), fs(a), fs(b), fr(a, b),
        fb(peak(case, "cudapatch") * 1024), fb(peak(case, "nixpkgs") * 1024),
        fb(peak(case, "cudapatch", "wchar")), fb(peak(case, "nixpkgs", "wchar")),
        fb(peak(case, "cudapatch", "write_bytes")), fb(peak(case, "nixpkgs", "write_bytes"))]))


def table(rows, cols):
    t = ["| " + " | ".join(cols) + " |", "| --- |" + " ---: |" * (len(cols) - 1)]
    return t + ["| " + " | ".join(r[c] for c in cols) + " |" for r in rows]


ROWS = {}
for case in ("corpus", "small"):
    if (case, "cudapatch") in RUNS:
        n, b = TREES.get(case, ("?", None))
        ROWS[case] = headline(case, labels[case], n, b)
filecases = sorted((c for c in SIZES), key=lambda c: SIZES[c][0])
for case in filecases:
    ROWS[case] = headline(case, f"`patchelf --set-rpath LONG` on {case[5:]}", 1, SIZES[case][0])
out.extend(table(ROWS.values(), HEAD))
w("")
w("Single files: `cudapatch patchelf --set-rpath LONG FILE` against `patchelf --set-rpath LONG FILE`, "
  f"LONG being {ENV.get('long_rpath_len', '?')} bytes (ten store-path-like entries). "
  "`libz-*` is Debian's libz.so.1 with a non-alloc section of zeros appended by "
  "`objcopy --add-section .bench_pad=… --set-section-flags .bench_pad=noload,readonly`, stored sparse "
  "(so a restore costs nothing; patchelf still reads and writes every byte, cudapatch does not touch the pad); "
  "`libcublasLt-real` is the corpus's libcublasLt.so.11 as shipped.\n")

# ---- targets -----------------------------------------------------------
w("## Targets (issue 6)\n")
w("| target | measured | met |\n| --- | --- | --- |")


def ratio(case):
    a, b = med(case, "cudapatch"), med(case, "nixpkgs")
    return b / a if a and b else None


def yes(ok):
    return "yes" if ok else "**no**"


r = ratio("corpus")
if r:
    w(f"| CUDA corpus ≥ 30× faster | {r:.0f}× | {yes(r >= 30)} |")
r = ratio("small")
if r:
    w(f"| many-small tree ≥ 10× faster | {r:.0f}× | {yes(r >= 10)} |")
cp_rss = [(c, peak(c, t)) for (c, t) in RUNS if t.startswith("cudapatch")]
if cp_rss:
    c, m = max(cp_rss, key=lambda x: x[1])
    w(f"| peak RSS < 64 MiB whatever the file sizes | max {fb(m * 1024)} ({c}); single 1 GiB file "
      f"{fb((peak('file-libz-1GiB', 'cudapatch') or 0) * 1024)} | {yes(m * 1024 < 64 << 20)} |")
if filecases:
    ws = [peak(c, "cudapatch", "wchar") for c in filecases]
    w(f"| bytes written independent of file size | {', '.join(fb(x) for x in ws)} for "
      f"{', '.join(fb(SIZES[c][0]) for c in filecases)} | {yes(max(ws) < 4 * min(ws) + 65536)} |")
    ts = [med(c, "cudapatch") for c in filecases]
    small_c = min(filecases, key=lambda c: SIZES[c][0])
    big_c = max(filecases, key=lambda c: SIZES[c][0])
    tr = med(big_c, "cudapatch") / med(small_c, "cudapatch")
    w(f"| time flat in file size | {fs(med(small_c, 'cudapatch'))} at {fb(SIZES[small_c][0])}, "
      f"{fs(med(big_c, 'cudapatch'))} at {fb(SIZES[big_c][0])} ({tr:.1f}×) | {yes(tr < 2)} |")
scales = sorted((int(c[6:]) for (c, t) in RUNS if c.startswith("scale-") and t == "cudapatch"))
if len(scales) >= 2:
    per = [med(f"scale-{n}", "cudapatch") / n for n in scales]
    spread = max(per) / min(per)
    cpu = [cpumed(f"scale-{n}", "cudapatch") / n for n in scales]
    cspread = max(cpu) / min(cpu)
    w(f"| time linear in file count | wall per file {', '.join(f'{p * 1e6:.0f} µs' for p in per)} at "
      f"{', '.join(map(str, scales))} files (max/min {spread:.2f}); CPU per file "
      f"{', '.join(f'{p * 1e6:.0f} µs' for p in cpu)} (max/min {cspread:.2f}) | "
      f"{yes(spread < 1.5) if spread < 1.5 else ('CPU yes, wall **no**' if cspread < 1.5 else '**no**')} |")
j1, j2 = med("jobs", "cudapatch-jobs1"), med("jobs", "cudapatch-jobs2")
if j1 and j2:
    w(f"| `--jobs` uses the cores it is given | --jobs 1 {fs(j1)}, --jobs 2 {fs(j2)} ({j1 / j2:.2f}× on "
      f"{ENV.get('cores')} cores, load {ENV.get('load_start')}) | {yes(j1 / j2 >= 1.4)} |")
w("")

# ---- file count --------------------------------------------------------
if scales:
    w("## Time against file count\n")
    w("Trees of N ELF files of at most 1 MiB from this machine's /usr/lib and /usr/bin, drawn in one "
      "fixed shuffled order (each tree contains the smaller ones; past the ~1,500 such files the pool "
      "is repeated in further store paths). Median wall time; per-file time in brackets.\n")
    w("| files | bytes | cudapatch | per file | CPU (user+sys) per file | peak RSS | the nixpkgs way | per file | ratio |")
    w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with open(os.path.join(RAW, "scale.dat"), "w") as d:
        for n in scales:
            c = f"scale-{n}"
            a, b = med(c, "cudapatch"), med(c, "nixpkgs")
            w(f"| {n} | {fb(TREES.get(c, (0, 0))[1])} | {fs(a)} | {a / n * 1e6:.0f} µs | {cpumed(c, 'cudapatch') / n * 1e6:.0f} µs | "
              f"{fb(peak(c, 'cudapatch') * 1024)} | {fs(b)} | "
              f"{(f'{b / n * 1e3:.1f} ms') if b else '–'} | {fr(a, b)} |")
            d.write(f"{n}\t{a}\t{b if b else 'NaN'}\n")
    w("")
    w("![time against file count](scaling-files.png)\n")

# ---- file size ---------------------------------------------------------
if filecases:
    w("## Time against file size\n")
    w("| file | size | allocated | cudapatch | peak RSS | written | patchelf | peak RSS | written | ratio |")
    w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with open(os.path.join(RAW, "size.dat"), "w") as d:
        for c in filecases:
            a, b = med(c, "cudapatch"), med(c, "nixpkgs")
            w(f"| {c[5:]} | {fb(SIZES[c][0])} | {fb(SIZES[c][1])} | {fs(a)} | {fb(peak(c, 'cudapatch') * 1024)} | "
              f"{fb(peak(c, 'cudapatch', 'wchar'))} | {fs(b)} | {fb(peak(c, 'nixpkgs') * 1024)} | "
              f"{fb(peak(c, 'nixpkgs', 'wchar'))} | {fr(a, b)} |")
            if c.startswith("file-libz"):
                d.write(f"{SIZES[c][0]}\t{a}\t{b}\n")
    w("")
    w("![time against file size](scaling-size.png)\n")

# ---- bytes written per file --------------------------------------------
wt = os.path.join(RAW, "small-written.tsv")
if os.path.exists(wt):
    rows = [l.split("\t") for l in open(wt).read().splitlines()]
    rows = [(int(s), int(b), st.strip()) for s, b, st in rows]
    w("## Bytes written per file (many-small tree)\n")
    w("What cudapatch's report gives as `bytes_written` (the plan's writes, holes excluded) for each "
      "file it changed, by file size.\n")
    w("| file size | files | median written | max written | strategies |")
    w("| --- | ---: | ---: | ---: | --- |")
    buckets = [(0, 100_000, "< 100 kB"), (100_000, 1_000_000, "100 kB – 1 MB"),
               (1_000_000, 10_000_000, "1 – 10 MB"), (10_000_000, 1 << 62, "≥ 10 MB")]
    for lo, hi, label in buckets:
        sel = [r for r in rows if lo <= r[0] < hi]
        if not sel:
            continue
        strat = {}
        for r in sel:
            strat[r[2]] = strat.get(r[2], 0) + 1
        w(f"| {label} | {len(sel)} | {fb(statistics.median(r[1] for r in sel))} | {fb(max(r[1] for r in sel))} | "
          f"{', '.join(f'{k} {v}' for k, v in sorted(strat.items()))} |")
    big = sorted(rows, key=lambda r: -r[1])[:5]
    w("")
    w("Largest writes: " + "; ".join(f"{fb(r[1])} to a {fb(r[0])} file ({r[2]})" for r in big) + ".\n")

# ---- jobs --------------------------------------------------------------
if j1 and j2:
    w("## `--jobs`\n")
    w("The many-small tree, cudapatch only.\n")
    w("| | wall (median) | user+sys (median) | peak RSS |\n| --- | ---: | ---: | ---: |")
    for t, label in (("cudapatch-jobs1", "--jobs 1"), ("cudapatch-jobs2", "--jobs 2")):
        cpu = statistics.median(r["user"] + r["sys"] for r in RUNS[("jobs", t)])
        w(f"| {label} | {fs(med('jobs', t))} | {fs(cpu)} | {fb(peak('jobs', t) * 1024)} |")
    w("")

# ---- agreement -------------------------------------------------------------
w("## Do both ways give the same RUNPATHs?\n")
w("After the first run of each tool, every patched file's RUNPATH, as `cudapatch print` reads it.\n")
w("| case | files | identical | nixpkgs has an extra empty entry | nixpkgs kept old entries | cudapatch cannot read its own output | cudapatch cannot read patchelf's output | other |")
w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for case in ("corpus", "small"):
    pa, pb = (os.path.join(RAW, f"{case}-runpaths-{t}.json") for t in ("cudapatch", "nixpkgs"))
    if not (os.path.exists(pa) and os.path.exists(pb)):
        continue
    a, b = json.load(open(pa)), json.load(open(pb))
    same = empty = kept = other = bad_a = bad_b = 0
    examples = []
    for p, ra in a.items():
        rb = b.get(p)
        if ra and ra.startswith("unreadable: "):
            bad_a += 1
            if bad_a <= 3:
                examples.append(f"`{os.path.basename(p)}` patched by cudapatch: {ra}")
        elif rb and rb.startswith("unreadable: "):
            bad_b += 1
            if bad_b <= 3:
                examples.append(f"`{os.path.basename(p)}` patched by patchelf: {rb}")
        elif ra == rb:
            same += 1
        elif rb is not None and rb.rstrip(":") == ra:
            empty += 1
        elif rb is not None and ra is not None and rb.startswith(ra + ":"):
            kept += 1
            if len(examples) < 2:
                examples.append(f"`{os.path.basename(p)}`: cudapatch `{ra}`, nixpkgs `{rb}`")
        else:
            other += 1
            if len(examples) < 4:
                examples.append(f"`{os.path.basename(p)}`: cudapatch `{ra}`, nixpkgs `{rb}`")
    w(f"| {case} | {len(a)} | {same} | {empty} | {kept} | {bad_a} | {bad_b} | {other} |")
    for e in examples:
        out.append(f"\n- {case}: {e}")
w("")
w("\nAn extra empty entry is addDriverRunpath's `/run/opengl-driver/lib:` on a file with no RUNPATH "
  "(glibc searches the current directory for it); \"kept old entries\" is auto-patchelf leaving a file "
  "untouched when nothing resolved, so its old RUNPATH (often `$ORIGIN`) survives behind the driver link, "
  "where cudapatch replaces it as the policy says (`--preserve-origin` keeps `$ORIGIN`).\n")

# ---- go test -bench ----------------------------------------------------------
for name, title in (("gobench.txt", "`go test -run=- -bench=. -benchmem ./rpath/...`"),
                    ("gobench-tree.txt", f"`BenchmarkPatchTree` on {ENV.get('prof_tree', '?')}, with `-cpuprofile` (the profile below)"),
                    ("pprof-top.txt", "Where the CPU time goes (`go tool pprof -top`, flat)"),
                    ("pprof-cum.txt", "Where the CPU time goes (`go tool pprof -top -cum`)")):
    p = os.path.join(RAW, name)
    if os.path.exists(p) and os.path.getsize(p):
        w(f"## {title}\n")
        w("```")
        w(open(p).read().rstrip())
        w("```\n")

# bench/README.md's section "Reading the numbers", up to the next heading of
# its level or above, copied as it is (internal/docs checks the copy).
reading = None
readme = os.path.join(BENCH, "README.md")
if os.path.exists(readme):
    lines = open(readme).read().split("\n")
    if "## Reading the numbers" in lines:
        start = lines.index("## Reading the numbers") + 1
        end = next((i for i in range(start, len(lines)) if re.match(r"#{1,2} ", lines[i])), len(lines))
        reading = "\n".join(lines[start:end]).strip()
if reading:
    w("## Reading the numbers\n")
    w(reading + "\n")

# Measurements made by other scripts (bench/thirdparty.sh) are kept: the
# part of bench/RESULTS.md from the KEPT heading on is carried over as is.
KEPT = "\n## Measurements of other scripts\n"
carried = ""
prev = os.path.join(BENCH, "RESULTS.md")
if os.path.exists(prev):
    text = open(prev).read()
    if KEPT in text:
        carried = text[text.index(KEPT):]
with open(os.path.join(OUT, "RESULTS.md"), "w") as f:
    f.write("\n".join(out).replace("\n\n\n", "\n\n") + carried)

# ---- the README's figures -----------------------------------------------
# The rows and columns the README quotes, copied cell for cell; the line above
# them names the run. internal/docs's test parses both files and fails when
# they differ, so a hand edit of either is caught.
README_ROWS = [c for c in ("corpus", "small", "file-libz-1GiB") if c in ROWS]
README_COLS = ["case", "files", "bytes", "cudapatch", "the nixpkgs way", "ratio", "peak RSS cudapatch",
               "peak RSS nixpkgs", "written cudapatch", "written nixpkgs"]
BEGIN, END = "<!-- bench/RESULTS.md: begin -->", "<!-- bench/RESULTS.md: end -->"
block = "\n".join([
    BEGIN,
    f"Figures of the run recorded in [bench/RESULTS.md](bench/RESULTS.md) (commit {ENV.get('commit', '?')}, "
    f"{ENV.get('date', '?')}; {ENV.get('cpu', '?')}, {ENV.get('cores', '?')} cores; "
    f"{ENV.get('patchelf', '?').split(' (')[0]}):",
    "",
    *table([ROWS[c] for c in README_ROWS], README_COLS),
    END])
readme = os.path.join(BENCH, "..", "README.md")
if PUBLISHED and os.path.exists(readme):
    text = open(readme).read()
    pat = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if pat.search(text):
        open(readme, "w").write(pat.sub(lambda _: block, text, count=1))
    else:
        print(f"report.py: {readme}: no {BEGIN} … {END} block; its figures were not updated", file=sys.stderr)
elif not PUBLISHED:
    with open(os.path.join(OUT, "README-figures.md"), "w") as f:
        f.write(block + "\n")

# ---- plots -------------------------------------------------------------
if shutil.which("gnuplot"):
    common = "set terminal pngcairo size 900,560 font 'sans,11'; set grid; set key top left; "
    if os.path.exists(os.path.join(RAW, "scale.dat")):
        subprocess.run(["gnuplot", "-e", common +
                        f"set output '{OUT}/scaling-files.png'; set title 'Wall time against file count (files ≤ 1 MiB)'; "
                        "set xlabel 'ELF files'; set ylabel 'seconds (log)'; set logscale y; set format y '10^{%L}'; "
                        f"plot '{RAW}/scale.dat' using 1:3 with linespoints lw 2 pt 7 title 'the nixpkgs way (patchelf ×3 per file)', "
                        f"'' using 1:2 with linespoints lw 2 pt 5 title 'cudapatch'"], check=False)
    if os.path.exists(os.path.join(RAW, "size.dat")):
        subprocess.run(["gnuplot", "-e", common +
                        f"set output '{OUT}/scaling-size.png'; set title 'Wall time of one --set-rpath against file size'; "
                        "set xlabel 'file size (bytes)'; set ylabel 'seconds (log)'; set logscale xy; set format x '10^{%L}'; set format y '10^{%L}'; "
                        f"plot '{RAW}/size.dat' using 1:3 with linespoints lw 2 pt 7 title 'patchelf 0.14.3', "
                        f"'' using 1:2 with linespoints lw 2 pt 5 title 'cudapatch patchelf'"], check=False)
