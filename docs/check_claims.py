#!/usr/bin/env python3
"""Fails when README.md or a page of docs/ calls a feature of docs/claims.txt missing: a
clause (a sentence, or the part of one between commas) that names the feature together with a
phrase such as "not implemented" or "not yet". Run by ctest as docs.claims; prints every such
clause with the line its paragraph starts on."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
MISSING = re.compile(r"not (yet )?(implemented|executable|executed|there|planned|supported|run)\b|"
                     r"\bnot yet\b|\bplanned only\b|\bunsupported\b", re.I)
features = []
for line in (root / "docs" / "claims.txt").read_text().splitlines():
    if line.strip() and not line.startswith("#"):
        name, pattern = line.split("\t", 1)
        features.append((name, re.compile(pattern, re.I)))

problems = 0
for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
    # paragraphs (lines up to a blank one; each table row its own), outside code blocks,
    # cut into clauses at sentence ends, commas, semicolons, table cells and the "·" of link lists
    paragraphs, current, first, code = [], [], 0, False
    for number, line in enumerate(page.read_text().splitlines() + [""], 1):
        if line.startswith("```"):
            code = not code
        if code or line.startswith("```") or not line.strip() or line.startswith("|"):
            if current:
                paragraphs.append((first, " ".join(current)))
            current = []
            if not code and line.startswith("|"):
                paragraphs.append((number, line))
            continue
        if not current:
            first = number
        current.append(line.strip())
    for number, paragraph in paragraphs:
        for clause in re.split(r"(?<=[.,;])\s+|\s[|·]\s", paragraph):
            if not MISSING.search(clause):
                continue
            for name, pattern in features:
                if pattern.search(clause):
                    problems += 1
                    print(f"{page.relative_to(root)}:{number}: calls '{name}' missing, which runs and is tested:\n"
                          f"    {clause.strip()[:300]}")
print(f"docs.claims: {problems} sentence(s) calling a working feature missing" if problems
      else f"docs.claims: OK ({len(features)} features, no page calls one missing)")
sys.exit(1 if problems else 0)
