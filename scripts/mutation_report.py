"""The mutation report: mutmut's results joined with the reviewed equivalent mutants.

    .venv/bin/python scripts/mutation_report.py            # after `make mutation` (mutants/ holds the run)

Reads `mutmut results --all true` and reports/bench/mutation_equivalents.tsv (one reviewed survivor per
line: mutant name, category, the mutated line as mutmut wrote it, an optional note), and writes
reports/bench/mutation_survivors.md: the score per file, killed / (mutants − equivalent), and every
survivor with its diff — each equivalent one under its category's reason, every other one as open.
An equivalence whose mutated line no longer matches the mutant (the code changed since the review) is
stale: it counts as open until reviewed again.
"""

from __future__ import annotations

import ast
import collections
import csv
import difflib
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
EQUIVALENTS = ROOT / "reports/bench/mutation_equivalents.tsv"
OUTPUT = ROOT / "reports/bench/mutation_survivors.md"

# why a mutant in each category cannot change any observable result (see reports/bench/mutation.md)
CATEGORIES = {
    "cpu-device": "a `device=` argument or `.to(device)` dropped: one CPU device, nothing to move (the CUDA "
    "placement is tested by tests/test_gpu.py on a GPU)",
    "same-dtype": "a dtype argument or cast dropped where every reaching value already has that dtype, or "
    "where type promotion gives the same dtype",
    "default": "an argument replaced by None or removed where the callee's default is the same value "
    "(bicubic/linear align_corners=False, fft dim=-1, irfft n = dim for even dim, eps = DENOMINATOR_EPS)",
    "rank-index": "a negative axis made positive where the tensor's rank makes both the same axis "
    "(transpose(+2, −1) of a 4-D tensor is transpose(−2, −1))",
    "einsum-case": "einsum subscripts in upper case: the same contraction",
    "cost-only": "changes only how much memory or time is used (chunk sizes, kept caches, contiguity, the "
    "shared-feature shortcut), never a value: every chunking and path equals the dense result by test",
    "measure-zero": "differs only on a set of probability zero or on exact values the code never sees "
    "(a QR diagonal exactly 0; x/±1 = x·±1; a boundary no reachable input hits)",
    "label-only": "changes a cache key's constant name or a repr only: no computed value reads it",
    "cpu-softmax": "CPU softmax of a bf16 tensor accumulates in float32 whatever dtype is asked for",
    "float32-result": "an intermediate computed in float32 instead of float64 before a float32 result: the "
    "difference is below the result's rounding",
    "unused": "a value no later code reads (an extra zero column, CLS terms of a grid without CLS, an argument "
    "the callee ignores) or a default every caller overrides",
    "library": "a library call given a value it treats the same (its default, a falsy None, a case it folds); "
    "the note names it",
}


# equivalent only in values or only on this machine: a stricter score counts them as survivors
NOT_STRICT = ("cpu-device", "cost-only", "float32-result", "cpu-softmax")


def results() -> dict[str, str]:
    """mutant name → status from mutmut (run in the repository root, where mutants/ is)."""
    out = subprocess.run(
        [str(ROOT / ".venv/bin/mutmut"), "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    status = {}
    for line in out.splitlines():
        name, sep, state = line.strip().rpartition(": ")
        if sep and name.startswith("rpevit."):
            status[name] = state.strip()
    return status


def mutated_lines(names: list[str]) -> dict[str, tuple[list[str], list[str]]]:
    """mutant name → (original lines, mutated lines), read from the mutated copies in mutants/."""
    by_module = collections.defaultdict(list)
    for name in names:
        by_module[name.rsplit(".", 1)[0]].append(name)
    diffs = {}
    for module, members in by_module.items():
        path = ROOT / "mutants" / module.replace(".", "/")
        source = (path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py").read_text()
        lines = source.splitlines()
        functions = {  # name → body lines (the def line left out: it names the mutant)
            node.name: lines[node.lineno : node.end_lineno]
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef)
        }
        for name in members:
            function = name.rsplit(".", 1)[1]
            base, number = function.rsplit("__mutmut_", 1)
            original = functions.get(base + "__mutmut_orig", [])
            mutant = functions.get(f"{base}__mutmut_{number}", [])
            removed, added = [], []
            for line in difflib.unified_diff(original, mutant, lineterm="", n=0):
                if line.startswith("-") and not line.startswith("---"):
                    removed.append(line[1:].strip())
                elif line.startswith("+") and not line.startswith("+++"):
                    added.append(line[1:].strip())
            diffs[name] = (removed, added)
    return diffs


def reviewed() -> dict[str, tuple[str, str, str]]:
    """mutant name → (category, mutated line, note) from the reviewed equivalents file."""
    if not EQUIVALENTS.exists():
        return {}
    with EQUIVALENTS.open() as handle:
        table = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)  # the lines hold quotes
        rows = [row for row in table if row and not row[0].startswith("#")]
    for row in rows:
        if row[1] not in CATEGORIES:
            sys.exit(f"error: {EQUIVALENTS.name}: unknown category {row[1]!r} for {row[0]}")
    return {row[0]: (row[1], row[2], row[3] if len(row) > 3 else "") for row in rows}


def main() -> None:
    status = results()
    if not status:
        sys.exit("error: mutmut reports no mutants here; run `make mutation` first")
    survivors = sorted(n for n, s in status.items() if s not in ("killed", "timeout"))
    diffs = mutated_lines(survivors)
    equivalents = reviewed()
    verdict = {}
    for name in survivors:
        category, line, _ = equivalents.get(name, (None, None, ""))
        added = " ".join(diffs[name][1])
        verdict[name] = category if category and line == added else ("stale" if category else "open")
    per_file = collections.defaultdict(collections.Counter)
    for name, state in status.items():
        module = name.rsplit(".", 1)[0]
        per_file[module]["mutants"] += 1
        per_file[module]["killed" if state in ("killed", "timeout") else verdict.get(name, "open")] += 1
    lines = [
        "# Surviving mutants, reviewed",
        "",
        "Generated by `scripts/mutation_report.py` from `mutmut results` and "
        "[mutation_equivalents.tsv](mutation_equivalents.tsv); the method and history are in "
        "[mutation.md](mutation.md). Score = killed (timeouts included) / (mutants − equivalent).",
        "",
        "| module | mutants | killed | equivalent | open | score |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    totals = collections.Counter()
    for module in sorted(per_file):
        c = per_file[module]
        equivalent = sum(c[k] for k in CATEGORIES)
        open_ = c["open"] + c["stale"]
        totals.update(mutants=c["mutants"], killed=c["killed"], equivalent=equivalent, open=open_)
        score = c["killed"] / max(1, c["mutants"] - equivalent)
        lines.append(f"| {module} | {c['mutants']} | {c['killed']} | {equivalent} | {open_} | {100 * score:.1f} % |")
    score = totals["killed"] / max(1, totals["mutants"] - totals["equivalent"])
    loose = sum(verdict[n] in NOT_STRICT for n in survivors)
    strict = totals["killed"] / max(1, totals["mutants"] - totals["equivalent"] + loose)
    lines.append(
        f"| **all** | {totals['mutants']} | {totals['killed']} | {totals['equivalent']} | {totals['open']} | "
        f"**{100 * score:.1f} %** |"
    )
    lines += [
        "",
        f"Counting the {loose} mutants that are equivalent only in values or only on this CPU "
        f"({', '.join(NOT_STRICT)}) as survivors: **{100 * strict:.1f} %**.",
        "",
        "## Equivalent mutants by category",
        "",
    ]
    for category, reason in CATEGORIES.items():
        members = [n for n in survivors if verdict[n] == category]
        if members:
            lines += [f"### {category} ({len(members)}): {reason}", ""]
            for n in members:
                note = equivalents[n][2]
                lines.append(f"- `{n}`: `{' '.join(diffs[n][1])}`" + (f" — {note}" if note else ""))
            lines.append("")
    open_names = [n for n in survivors if verdict[n] in ("open", "stale")]
    lines += [f"## Open survivors ({len(open_names)})", ""]
    for name in open_names:
        removed, added = diffs[name]
        note = " (stale review)" if verdict[name] == "stale" else ""
        lines.append(f"- `{name}`{note} ({status[name]}): `{' '.join(removed)}` → `{' '.join(added)}`")
    OUTPUT.write_text("\n".join(lines) + "\n")
    print(
        f"{OUTPUT.relative_to(ROOT)}: score {100 * score:.1f} % ({totals['killed']} killed of "
        f"{totals['mutants']} − {totals['equivalent']} equivalent; {totals['open']} open)"
    )


if __name__ == "__main__":
    main()
