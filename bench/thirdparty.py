#!/usr/bin/env python3
"""Counts, per third-party tree and binary, the RUNPATH entries dlopen
discovery added (bench/thirdparty.sh): an entry of a file's RUNPATH that
only dependencies found by discovery reach (sources dlopen-string,
dlopen-prefix, dlopen-sibling, and 2d62424's output). With used logs
(RUNSDIR/TREE-LABEL.used: "FILE<TAB>DIR" lines, a library the loader
found in DIR through FILE's RUNPATH) it counts the added entries a run
went through.

    thirdparty.py RUNSDIR TREE... -- LABEL...
    thirdparty.py used LOG...   (LD_DEBUG=libs,files logs → FILE<TAB>DIR lines)
"""
import collections
import json
import os
import re
import sys

DISCOVERY = {"dlopen-string", "dlopen-prefix", "dlopen-sibling", "output"}


def added(report):
    """(file, entry) → the discovery sources that brought it, and the ELF count."""
    out, elves = {}, 0
    for f in report.get("files") or []:
        if f.get("skipped") == "not ELF":
            continue
        elves += 1
        rp = f.get("runpath") or ""
        entries = rp.split(":") if isinstance(rp, str) else list(rp)
        why = collections.defaultdict(set)
        for d in f.get("deps") or []:
            for e in {d.get("entry"), d.get("dir")} - {None, ""}:
                why[e].add(d.get("source"))
        for e in entries:
            if why.get(e) and why[e] <= DISCOVERY:
                out[(f["path"], e)] = sorted(why[e])
    return out, elves


def runpath_loads(logs):
    """FILE<TAB>DIR for each library LD_DEBUG=libs,files logs show found
    in DIR through FILE's RUNPATH. FILE is the object that asked (the
    "needed by" or "dynamically loaded by" of the files log): glibc
    searches the asking object's RUNPATH, and the "RUNPATH from file"
    label of the libs log may name another object that had the same
    directory first (glibc shares one entry a directory). The last file
    tried of a search is the one found (a failed search ends in an
    error, not a blank line)."""
    out = set()
    for log in logs:
        main = None   # the main program: the label of its first search
        asker = None  # the object whose dependency is being searched
        owner = None  # the asker, while its RUNPATH is being tried
        last = None   # (owner, dir) of the last file tried
        for line in open(log, errors="replace"):
            _, _, msg = line.partition(":\t")
            msg = msg.rstrip("\n")
            if msg.startswith("file="):
                m = re.search(r"(?:needed by|dynamically loaded by) (.*) \[\d+\]$", msg)
                asker = m.group(1) if m else None
                last = None
            elif msg.startswith("find library=") or msg.startswith("calling init"):
                last = None
            elif msg.startswith(" search path="):
                owner = None
                if "(RUNPATH from file " in msg:
                    label = msg.rsplit("(RUNPATH from file ", 1)[1].rstrip(")")
                    if asker == "<main program>" and main is None:
                        main = label
                    owner = main if asker == "<main program>" else asker
            elif msg.startswith(" search cache=") or msg.startswith(" search "):
                owner = None
            elif msg.startswith("  trying file="):
                f = msg[len("  trying file="):]
                last = (owner, os.path.dirname(f)) if owner else None
            elif msg.strip() == "" and last:
                out.add(last)
                last = None
    return out


def main():
    if sys.argv[1] == "used":
        for fp, d in sorted(runpath_loads(sys.argv[2:])):
            print("%s\t%s" % (fp, d))
        return
    w = sys.argv[1]
    sep = sys.argv.index("--")
    trees, labels = sys.argv[2:sep], sys.argv[sep + 1:]
    head = ["tree", "ELF files"]
    for l in labels:
        head += ["added (%s)" % l, "used (%s)" % l]
    rows, tot = [], collections.Counter()
    detail = {}
    for t in trees:
        row = [t, ""]
        for l in labels:
            p = os.path.join(w, "%s-%s" % (t, l))
            if not os.path.exists(p + ".json"):
                row += ["-", "-"]
                continue
            a, n = added(json.load(open(p + ".json")))
            row[1] = str(n)
            tot["files"] += n if l == labels[0] else 0
            tot[l] += len(a)
            used = "-"
            if os.path.exists(p + ".used"):
                ran = set()
                for line in open(p + ".used"):
                    fp, _, d = line.rstrip("\n").partition("\t")
                    ran.add((os.path.realpath(fp), os.path.realpath(d)))
                u = [k for k in a if (os.path.realpath(k[0]), os.path.realpath(k[1])) in ran]
                used = str(len(u))
                tot["used " + l] += len(u)
                detail[(t, l, "used")] = u
            row += [str(len(a)), used]
            detail[(t, l)] = a
        rows.append(row)
    rows.append(["total", str(tot["files"])] +
                [x for l in labels for x in (str(tot[l]), str(tot.get("used " + l, "-")))])
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    # What each binary added, by source, and the files that got most.
    for l in labels:
        by = collections.Counter()
        per = collections.Counter()
        for t in trees:
            for (fp, e), srcs in detail.get((t, l), {}).items():
                by["+".join(srcs)] += 1
                per[(t, os.path.basename(fp))] += 1
        print("\n%s by source: %s" % (l, dict(by)))
        print("%s most: %s" % (l, ", ".join("%s/%s %d" % (t, f, n) for (t, f), n in per.most_common(8))))
    if os.environ.get("VERBOSE"):
        for t in trees:
            for l in labels:
                for (fp, e), srcs in sorted(detail.get((t, l), {}).items()):
                    print("%s %s %s -> %s (%s)" % (t, l, fp.split("/runs/")[-1], e.split("/runs/")[-1], ",".join(srcs)))


if __name__ == "__main__":
    main()
