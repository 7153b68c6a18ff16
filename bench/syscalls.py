#!/usr/bin/env python3
"""Counts the system calls a cudapatch run made on each file, from strace.

  strace -f -qq -e trace=openat,pread64,pwrite64,read,write,close,ftruncate,fsync,fdatasync,fchmod \\
      -o TRACE cudapatch ...
  syscalls.py TRACE ROOT

Each call on a descriptor is charged to the file the descriptor was opened
on (a reopen through /proc/self/fd/N is charged to N's file); only files
below ROOT count. For each file: its read calls (pread64, read), and its
write-side calls: the open for writing, pwrite64/write, ftruncate, fsync,
fdatasync, fchmod, and the close of a descriptor opened for writing. Prints
the distributions over all files and over the files that were written, and
the largest.
"""
import collections
import re
import sys

trace, root = sys.argv[1], sys.argv[2].rstrip("/") + "/"
CALL = re.compile(r"^(\d+)\s+(\w+)\((.*)$")
RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (\w+) resumed>(.*)$")
RESULT = re.compile(r"=\s+(-?\d+)")

fds = {}  # fd -> (path, writable)
reads = collections.Counter()
writes = collections.Counter()
pending = {}  # pid -> (call, args) of an unfinished call


def finish(call, args, rest):
    m = RESULT.search(rest)
    ret = int(m.group(1)) if m else -1
    if call == "openat":
        pm = re.match(r'AT_FDCWD, "([^"]*)", ([A-Z_|]+)', args)
        if not pm or ret < 0:
            return
        path, flags = pm.group(1), pm.group(2)
        writable = "O_RDWR" in flags or "O_WRONLY" in flags
        pr = re.match(r"/proc/self/fd/(\d+)$", path)
        if pr and int(pr.group(1)) in fds:
            path = fds[int(pr.group(1))][0]
        fds[ret] = (path, writable)
        if writable and path.startswith(root):
            writes[path] += 1
        return
    fm = re.match(r"(\d+)", args)
    if not fm:
        return
    fd = int(fm.group(1))
    if fd not in fds:
        return
    path, writable = fds[fd]
    if call == "close":
        del fds[fd]
    if not path.startswith(root):
        return
    if call in ("pread64", "read"):
        reads[path] += 1
    elif call in ("pwrite64", "write", "ftruncate", "fsync", "fdatasync", "fchmod") or (call == "close" and writable):
        writes[path] += 1


with open(trace) as f:
    for line in f:
        line = line.rstrip("\n")
        m = RESUMED.match(line)
        if m:
            pid, call, rest = m.groups()
            if pid in pending:
                c, args = pending.pop(pid)
                finish(c, args, rest)
            continue
        m = CALL.match(line)
        if not m:
            continue
        pid, call, rest = m.groups()
        if rest.endswith("<unfinished ...>"):
            pending[pid] = (call, rest[: -len("<unfinished ...>")])
            continue
        # rest is "args) = ret"; the args end at the last ") = "
        i = rest.rfind(") = ")
        args = rest[:i] if i >= 0 else rest
        finish(call, args, rest[i:] if i >= 0 else "")


def dist(counter, files):
    vals = sorted(counter.get(p, 0) for p in files)
    if not vals:
        return "no files"
    hist = collections.Counter(vals)
    med = vals[len(vals) // 2]
    return "median %d, max %d; %s" % (med, vals[-1], ", ".join("%d: %d files" % (k, hist[k]) for k in sorted(hist)))


every = set(reads) | set(writes)
written = {p for p in writes}
print("files touched: %d; written: %d" % (len(every), len(written)))
print("read calls per file (all files): " + dist(reads, every))
print("read calls per file (written files): " + dist(reads, written))
print("write-side calls per written file: " + dist(writes, written))
print("total read calls %d, total write-side calls %d" % (sum(reads.values()), sum(writes.values())))
worst = sorted(every, key=lambda p: (-reads[p], p))[:3]
print("most reads: " + "; ".join("%s %d" % (p[len(root):], reads[p]) for p in worst))
worst = sorted(written, key=lambda p: (-writes[p], p))[:3]
print("most write-side calls: " + "; ".join("%s %d" % (p[len(root):], writes[p]) for p in worst))
