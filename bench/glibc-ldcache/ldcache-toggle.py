#!/usr/bin/env python3
"""Switch resolution-cache notes off and on in place, for A/B measurements.

  ldcache-toggle.py off|on|status|print FILE...
  ldcache-toggle.py set FILE DESCRIPTOR

"off" changes the note type of every .note.nixos.ldcache note (owner
"NixOS", type 0x63a86cb6) to 0x63a86cb7, which the loader does not know;
"on" changes it back. Four bytes per file change, nothing moves, so a tree
measured with and without its notes is otherwise the same files on the same
disk blocks. "status" prints how many files have a note on, off, or none;
"print" prints each file's note entries, one "NAME -> PATH-LIST" a line.
"set" overwrites the descriptor of FILE's note in place with DESCRIPTOR
("\\0" written for each NUL), padded with NULs to the note's size (for
crafting test notes; it must be shorter than the descriptor it replaces, which
leaves room for the terminating empty name).
Only little-endian ELF files are handled (x86_64, aarch64); others are left
alone and counted as "none".
"""
import struct
import sys

ON, OFF = 0x63A86CB6, 0x63A86CB7


def notes(f):
    """Yield (file offset of n_type, n_type, descriptor, its file offset)
    of the NixOS ldcache notes."""
    f.seek(0)
    ehdr = f.read(64)
    if len(ehdr) < 52 or ehdr[:4] != b"\x7fELF" or ehdr[5] != 1:
        return
    if ehdr[4] == 2:
        phoff, = struct.unpack_from("<Q", ehdr, 32)
        phentsize, phnum = struct.unpack_from("<HH", ehdr, 54)
        fmt, pt_off, pt_sz, pt_align = "<IIQQQQQQ", 2, 5, 7
    elif ehdr[4] == 1:
        phoff, = struct.unpack_from("<I", ehdr, 28)
        phentsize, phnum = struct.unpack_from("<HH", ehdr, 42)
        fmt, pt_off, pt_sz, pt_align = "<IIIIIIII", 1, 4, 7
    else:
        return
    f.seek(phoff)
    ph = f.read(phentsize * phnum)
    for i in range(phnum):
        if (i + 1) * phentsize > len(ph):
            break
        p = struct.unpack_from(fmt, ph, i * phentsize)
        if p[0] != 4:  # PT_NOTE
            continue
        align = 8 if p[pt_align] == 8 else 4
        f.seek(p[pt_off])
        data = f.read(p[pt_sz])
        pos = 0
        while pos + 12 <= len(data):
            namesz, descsz, typ = struct.unpack_from("<III", data, pos)
            name = data[pos + 12 : pos + 12 + namesz]
            if typ in (ON, OFF) and name == b"NixOS\0":
                d = pos + 12 + (namesz + align - 1) // align * align
                yield p[pt_off] + pos + 8, typ, data[d : d + descsz], p[pt_off] + d
            pos += 12 + (namesz + align - 1) // align * align + (descsz + align - 1) // align * align


def set_desc(path, text):
    new = text.encode().replace(b"\\0", b"\0")
    with open(path, "r+b") as f:
        found = list(notes(f))
        if not found:
            sys.exit(f"ldcache-toggle: {path}: no note")
        _, _, desc, desc_off = found[0]
        if len(new) >= len(desc):  # one NUL at least for the terminating empty name
            sys.exit(f"ldcache-toggle: {path}: descriptor of {len(new)} bytes, room for {len(desc) - 1}")
        f.seek(desc_off)
        f.write(new + b"\0" * (len(desc) - len(new)))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "set":
        return set_desc(sys.argv[2], sys.argv[3])
    if len(sys.argv) < 2 or sys.argv[1] not in ("on", "off", "status", "print"):
        sys.exit(__doc__)
    mode, counts = sys.argv[1], {"on": 0, "off": 0, "none": 0}
    for path in sys.argv[2:]:
        try:
            with open(path, "r+b" if mode in ("on", "off") else "rb") as f:
                found = list(notes(f))
                for off, typ, desc, _ in found:
                    counts["on" if typ == ON else "off"] += 1
                    if mode == "print":
                        parts = desc.split(b"\0")
                        for name, paths in zip(parts[0::2], parts[1::2]):
                            if not name:
                                break
                            print(f"{path}: {name.decode(errors='replace')} -> {paths.decode(errors='replace')}")
                    elif mode != "status":
                        f.seek(off)
                        f.write(struct.pack("<I", ON if mode == "on" else OFF))
                if not found:
                    counts["none"] += 1
        except OSError as e:
            sys.exit(f"ldcache-toggle: {path}: {e.strerror}")
    if mode == "status":
        print(f"notes on: {counts['on']}, off: {counts['off']}, files without: {counts['none']}")


if __name__ == "__main__":
    main()
