"""The mutation report: mutmut's results joined with the reviews of its survivors.

    .venv/bin/python scripts/mutation_report.py            # after `make mutation` (mutants/ holds the run)
    .venv/bin/python scripts/mutation_report.py --results reports/bench/mutation_results.txt
        # the committed statuses: a full run and its survivors' re-run (mutants/ still needed for the diffs)

Reads `mutmut results --all true` and reports/bench/mutation_equivalents.tsv (one reviewed survivor per
line: mutant name, category, the mutated line as mutmut wrote it, a note), and writes
reports/bench/mutation_survivors.md: the score per file, killed / (mutants − equivalent), the mutants killed
by timeout by name, and every survivor with its diff under its category. Every review follows one rule
(RULE): an EQUIVALENT category says why no input shows a difference; an OBSERVABLE one names the input that
does, and such a survivor counts against the score. A review whose mutated line no longer matches the
mutant (the code changed since) is stale: it counts as open until reviewed again.
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

# The one rule of every review: a mutant is equivalent only if no valid input of any supported dtype and
# device gives an observable difference in values, dtype, device placement or a documented cost contract.
RULE = (
    "a mutant is equivalent only if no valid input of any supported dtype (float32, float64, bfloat16) and "
    "device (CPU, CUDA) gives an observable difference in values, dtype, device placement or a documented cost "
    "contract (the chunked paths' memory budget); each review says why no input can show it, or which input does"
)

# categories that meet the rule: why no input shows a difference (each review's note says it for its mutant)
EQUIVALENT = {
    "same-dtype": "a dtype argument or cast dropped where every reaching value has that dtype, or promotion gives "
    "the same dtype and values, for every supported input dtype",
    "default": "an argument replaced by None or removed where the callee's default is the same value "
    "(bicubic/linear align_corners=False, fft dim=-1, irfft n = dim for even dim, eps = DENOMINATOR_EPS)",
    "rank-index": "a negative axis made positive where every reaching tensor's rank makes both the same axis",
    "einsum-case": "einsum subscripts in upper case: the same contraction",
    "cost-only": "changes only time or memory outside the documented chunk budget (caches, contiguity, a batch "
    "size scipy draws the same stream with), never a value, dtype or device",
    "measure-zero": "differs only on inputs no valid call can give (a QR diagonal exactly 0; I + S singular for "
    "skew S) or where both branches compute the same exact value",
    "label-only": "changes a cache key's constant name or a repr only: no computed value reads it",
    "unused": "a value no later code reads, or a default every caller overrides",
    "library": "a library call given a value it treats the same (its default, a falsy None, a case it folds)",
}

# categories of reviewed survivors: an input shows the difference (the note names it); they count as survivors
OBSERVABLE = {
    "device": "device placement: a CUDA input (or PyTorch's meta device) shows a tensor made on the CPU",
    "dtype": "a bfloat16, float16 or float64 input shows another dtype or other values",
    "rounding": "a float32 intermediate where float64 was meant, or another rounding order: last bits differ",
    "memory-contract": "the chunked paths' memory budget changes (a cost contract)",
    "gpu-numerics": "differs only where a GPU kernel accumulates differently from the CPU one",
    "untested": "an observable difference that no test in scope checks yet (the note names the input)",
}
CATEGORIES = {**EQUIVALENT, **OBSERVABLE}
# what mutmut reports as detected: a failing test, a test run past its time limit (the mutant made a loop
# endless or an FFT astronomically long), a crashed test process (unbounded recursion); the last two are named
DETECTED = ("killed", "timeout", "segfault")


def results(path: pathlib.Path | None = None) -> dict[str, str]:
    """mutant name → status: from `mutmut results --all true` (run in the repository root, where mutants/
    is), or from `path`, a saved copy of that output (lines `name: status`; `#` lines are comments) — the
    combined statuses of a full run and a later run of its survivors, which mutmut alone cannot show."""
    if path is None:
        command = [str(ROOT / ".venv/bin/mutmut"), "results", "--all", "true"]
        out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True).stdout
    else:
        out = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#"))
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
    saved = sys.argv[sys.argv.index("--results") + 1] if "--results" in sys.argv else None
    status = results(pathlib.Path(saved) if saved else None)
    if not status:
        sys.exit("error: mutmut reports no mutants here; run `make mutation` first")
    survivors = sorted(n for n, s in status.items() if s not in DETECTED)
    diffs = mutated_lines(survivors)
    reviews = reviewed()
    verdict = {}
    for name in survivors:
        category, line, _ = reviews.get(name, (None, None, ""))
        added = " ".join(diffs[name][1])
        verdict[name] = category if category and line == added else ("stale" if category else "open")
    per_file = collections.defaultdict(collections.Counter)
    for name, state in status.items():
        module = name.rsplit(".", 1)[0]
        per_file[module]["mutants"] += 1
        per_file[module]["killed" if state in DETECTED else verdict.get(name, "open")] += 1
    lines = [
        "# Surviving mutants, reviewed",
        "",
        "Generated by `scripts/mutation_report.py` from `mutmut results` and "
        "[mutation_equivalents.tsv](mutation_equivalents.tsv); the method and history are in "
        "[mutation.md](mutation.md). The rule of every review: " + RULE + ". Score = killed (timeouts and crashes "
        "included) "
        "/ (mutants − equivalent); a reviewed survivor an input can show counts against it.",
        "",
        "| module | mutants | killed | equivalent | survivors (reviewed: an input shows them) | open | score |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    totals = collections.Counter()
    for module in sorted(per_file):
        c = per_file[module]
        equivalent, shown = sum(c[k] for k in EQUIVALENT), sum(c[k] for k in OBSERVABLE)
        open_ = c["open"] + c["stale"]
        totals.update(mutants=c["mutants"], killed=c["killed"], equivalent=equivalent, shown=shown, open=open_)
        score = c["killed"] / max(1, c["mutants"] - equivalent)
        lines.append(
            f"| {module} | {c['mutants']} | {c['killed']} | {equivalent} | {shown} | {open_} | {100 * score:.1f} % |"
        )
    score = totals["killed"] / max(1, totals["mutants"] - totals["equivalent"])
    lines.append(
        f"| **all** | {totals['mutants']} | {totals['killed']} | {totals['equivalent']} | {totals['shown']} | "
        f"{totals['open']} | **{100 * score:.1f} %** |"
    )
    timeouts = sorted(n for n, s in status.items() if s == "timeout")
    crashes = sorted(n for n, s in status.items() if s == "segfault")
    lines += ["", f"## Killed by timeout ({len(timeouts)})", "", *[f"- `{n}`" for n in timeouts], ""]
    lines += [f"## Killed by a crashed test process ({len(crashes)})", "", *[f"- `{n}`" for n in crashes], ""]
    for title, group in (("Equivalent under the rule", EQUIVALENT), ("Survivors an input shows", OBSERVABLE)):
        counts = {category: sum(verdict[n] == category for n in survivors) for category in group}
        lines += [f"## {title}", "", ", ".join(f"{c} {k}" for c, k in counts.items() if k) or "none", ""]
        for category, reason in group.items():
            members = [n for n in survivors if verdict[n] == category]
            if members:
                lines += [f"### {category} ({len(members)}): {reason}", ""]
                for n in members:
                    note = reviews[n][2]
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
        f"{totals['mutants']} − {totals['equivalent']} equivalent; {totals['shown']} reviewed survivors, "
        f"{totals['open']} open; {len(timeouts)} by timeout)"
    )


if __name__ == "__main__":
    main()
