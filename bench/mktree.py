#!/usr/bin/env python3
"""Builds a store-like tree of this machine's ELF files, for benchmarks.

  mktree.py DEST                      every ELF file of /usr/lib/x86_64-linux-gnu
                                      (recursively) and /usr/bin
  mktree.py DEST --count N --max-size BYTES
                                      N ELF files of at most BYTES each, drawn from
                                      the same pool in a fixed shuffled order (so the
                                      500-file tree is part of the 1000-file one);
                                      past the pool's size the pool is repeated in
                                      further store paths

Library files go to DEST/store/<hash>-usr-lib[-rK]/lib/<relative path>,
programs to DEST/store/<hash>-usr-bin[-rK]/bin/<name>. Each file is copied on
its own (hard links are not kept: cudapatch, like a Nix build, would refuse to
rewrite a file with several links). The relative symbolic links of the library
directory (libz.so.1 -> libz.so.1.2.13) are recreated next to their targets, so
DT_NEEDED names resolve as they do on the machine.
"""
import hashlib
import os
import random
import shutil
import sys

SOURCES = [("usr-lib", "lib", "/usr/lib/x86_64-linux-gnu"), ("usr-bin", "bin", "/usr/bin")]


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def store_name(name):
    h = hashlib.sha256(name.encode()).hexdigest()
    alphabet = "0123456789abcdfghijklmnpqrsvwxyz"  # nix base32
    return "".join(alphabet[int(h[i : i + 2], 16) % 32] for i in range(0, 64, 2)) + "-" + name


def pool(max_size):
    out = []
    for tag, sub, src in SOURCES:
        for root, dirs, files in os.walk(src):
            dirs.sort()
            for fn in sorted(files):
                p = os.path.join(root, fn)
                if os.path.islink(p) or not os.path.isfile(p) or not is_elf(p):
                    continue
                if max_size and os.path.getsize(p) > max_size:
                    continue
                out.append((tag, sub, src, os.path.relpath(p, src)))
    return out


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if args else 2)
    dest = args[0]
    if dest.startswith("-"):
        sys.exit(f"mktree: DEST comes first, got option {dest!r} (see --help)")
    count = max_size = 0
    if "--count" in args:
        count = int(args[args.index("--count") + 1])
    if "--max-size" in args:
        max_size = int(args[args.index("--max-size") + 1])
    files = pool(max_size)
    if count:
        random.Random(1).shuffle(files)
        chosen = [(i // len(files), files[i % len(files)]) for i in range(count)]
    else:
        chosen = [(0, f) for f in files]
    copied = {}  # (rep, src) -> set of relative paths
    total = 0
    for rep, (tag, sub, src, rel) in chosen:
        name = tag + (f"-r{rep}" if rep else "")
        d = os.path.join(dest, "store", store_name(name), sub)
        target = os.path.join(d, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(src, rel), target)
        shutil.copymode(os.path.join(src, rel), target)
        copied.setdefault((rep, src, d), set()).add(rel)
        total += os.path.getsize(target)
    links = 0
    for (rep, src, d), rels in copied.items():
        dirs = {os.path.dirname(r) for r in rels}
        for rd in sorted(dirs):
            sd = os.path.join(src, rd)
            for fn in sorted(os.listdir(sd)):
                p = os.path.join(sd, fn)
                if not os.path.islink(p):
                    continue
                t = os.readlink(p)
                if t.startswith("/"):
                    continue
                trel = os.path.normpath(os.path.join(rd, t))
                if trel not in rels:
                    continue
                lp = os.path.join(d, rd, fn)
                if not os.path.lexists(lp):
                    os.symlink(t, lp)
                    links += 1
    print(f"mktree: {len(chosen)} ELF files ({total / 1e6:.0f} MB) and {links} links under {dest}/store",
          file=sys.stderr)


if __name__ == "__main__":
    main()
