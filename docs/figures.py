#!/usr/bin/env python3
"""The figures of docs/ARCHITECTURE.md's "The house in figures", read from the source.

    python3 docs/figures.py          rewrite the block between the figures markers
    python3 docs/figures.py --check  exit 1 when the block differs from the source (CI)

Every figure in that block comes from here, so the map cannot drift from the code: a change
that moves a figure regenerates it with the first command.
"""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
BEGIN = "<!-- figures:begin (python3 docs/figures.py) -->"
END = "<!-- figures:end -->"
# Crates a user links, as opposed to the tools that test and measure them.
LIBRARY = [
    "leasehold-core",
    "leasehold-ring",
    "leasehold-local",
    "leasehold-storage",
    "leasehold-engine",
    "leasehold",
    "leasehold-conformance",
    "leasehold-cli",
]
DATABASES = re.compile(r"postgres|mysql|mariadb|sqlite|galera", re.IGNORECASE)


def tracked(prefix):
    """Files git tracks under `prefix` (so a clean clone gives the same figures)."""
    out = subprocess.run(
        ["git", "ls-files", "--", prefix], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [ROOT / p for p in out.splitlines() if p.endswith(".rs")]


def source_files(crate):
    """A crate's library source: `src/`, without test modules kept in files of their own."""
    return [
        p
        for p in tracked(f"crates/{crate}/src")
        if not p.name.startswith("tests") and "/tests/" not in str(p)
    ]


def lines(path):
    return sum(1 for _ in path.open(encoding="utf-8"))


def rel(path):
    return str(path.relative_to(ROOT))


def public_methods():
    """Public methods per type of the facade, by `impl Type` blocks (trait impls left out)."""
    counts = {}
    for path in source_files("leasehold"):
        text = path.read_text(encoding="utf-8")
        depth = 0
        current = None
        current_depth = None
        for line in text.splitlines():
            stripped = line.strip()
            header = re.match(r"impl(?:<[^>]*>)?\s+([A-Za-z_][A-Za-z0-9_]*)(?:<[^{]*>)?\s*\{", stripped)
            if header and " for " not in stripped and current is None:
                current = header.group(1)
                current_depth = depth
            elif current is not None and depth == current_depth + 1 and re.match(
                r"pub (async )?fn ", stripped
            ):
                counts[current] = counts.get(current, 0) + 1
            depth += line.count("{") - line.count("}")
            if current is not None and depth <= current_depth:
                current = None
    return counts


def root_names():
    """Names the facade's root exports: `pub use` items and `pub mod`s of lib.rs."""
    text = (ROOT / "crates/leasehold/src/lib.rs").read_text(encoding="utf-8")
    names = 0
    for item in re.findall(r"^pub use ([^;]+);", text, re.MULTILINE | re.DOTALL):
        inner = re.search(r"\{(.*)\}\s*$", item, re.DOTALL)
        if inner:
            parts = [p.strip() for p in re.split(r",(?![^{]*\})", inner.group(1)) if p.strip()]
            names += len([p for p in parts if p != "self"]) + (1 if "self" in parts else 0)
        else:
            names += 1
    names += len(re.findall(r"^pub mod ", text, re.MULTILINE))
    return names


def storage_files_naming_a_database():
    """Storage files outside `backend/` whose code (not comments) names a database."""
    hits = []
    for path in source_files("leasehold-storage"):
        if "/backend/" in str(path):
            continue
        code = [
            l for l in path.read_text(encoding="utf-8").splitlines() if not l.strip().startswith("//")
        ]
        if any(DATABASES.search(l) for l in code):
            hits.append(rel(path))
    return hits


def block():
    out = ["| crate | library files | lines | largest file |", "|---|---|---|---|"]
    big = []
    for crate in LIBRARY:
        files = source_files(crate)
        sizes = sorted(((lines(p), p) for p in files), key=lambda t: (-t[0], rel(t[1])))
        total = sum(n for n, _ in sizes)
        largest = f"`{rel(sizes[0][1]).split('/src/', 1)[1]}` {sizes[0][0]}" if sizes else ""
        out.append(f"| `{crate}` | {len(files)} | {total:,} | {largest} |")
        big += [f"`{rel(p)}` {n}" for n, p in sizes if n > 500]
    out.append("")
    out.append(f"- Library files over 500 lines: {len(big)}" + (f" ({', '.join(big)})." if big else "."))
    methods = public_methods()
    shown = ", ".join(
        f"`{t}` {n}" for t, n in sorted(methods.items(), key=lambda kv: (-kv[1], kv[0])) if n >= 5
    )
    out.append(f"- Public methods per facade type (5 or more): {shown}.")
    out.append(f"- Names at the facade's root (`pub use` items and `pub mod`s): {root_names()}.")
    naming = storage_files_naming_a_database()
    out.append(
        f"- Storage files outside `backend/` whose code names a database: {len(naming)}"
        + (f" ({', '.join('`' + n.split('/src/', 1)[1] + '`' for n in naming)})." if naming else ".")
    )
    return "\n".join(out)


def main():
    doc = DOC.read_text(encoding="utf-8")
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    fresh = doc[:start] + "\n" + block() + "\n" + doc[end:]
    if "--check" in sys.argv:
        if fresh != doc:
            sys.stderr.write(
                "docs/ARCHITECTURE.md's figures differ from the source: run python3 docs/figures.py\n"
            )
            sys.exit(1)
        return
    DOC.write_text(fresh, encoding="utf-8")


if __name__ == "__main__":
    main()
