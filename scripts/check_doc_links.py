#!/usr/bin/env python3
"""Every relative link of the README, bench/README.md and docs/*.md leads to a file that exists,
and every #anchor to a heading of it (GitHub's heading slugs). Prints the broken ones; exit 1
if any.

    python3 scripts/check_doc_links.py .
"""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else "."
files = [os.path.join(root, "README.md"), os.path.join(root, "bench/README.md")]
files += [os.path.join(root, "docs", f) for f in sorted(os.listdir(os.path.join(root, "docs"))) if f.endswith(".md")]
def slugs(path):
    out, seen = set(), {}
    in_code = False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            in_code = not in_code
        if in_code: continue
        m = re.match(r"^(#{1,6})\s+(.*?)\s*$", line)
        if not m: continue
        s = m.group(2).strip().lower()
        s = re.sub(r"[^\w\- ]", "", s)
        s = s.replace(" ", "-")
        n = seen.get(s, 0); seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out
bad = 0
for f in files:
    text = open(f, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target): continue
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(dest):
            print(f"{os.path.relpath(f, root)}: {target}: no such file"); bad += 1; continue
        if anchor and dest.endswith(".md") and anchor not in slugs(dest):
            print(f"{os.path.relpath(f, root)}: {target}: no such heading"); bad += 1
print(f"{len(files)} files checked, {bad} broken links")
sys.exit(1 if bad else 0)
