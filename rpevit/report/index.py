"""The index reports/<preset>/README.md: the headline result (best variant per backend, the
Performer − softmax gap with its interval over seeds), the texts the notebooks generated, a short
guide, then every executed notebook with the figures and tables it produced (from the manifest)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..lab.result import results
from ..lab.schema import finished
from ..lab.store import records
from .store import PLOTLY_JS, read_manifest, report_dir


def headline(found: list[dict], preset: str = "<preset>", designed: bool = False) -> list[str]:
    """Markdown lines: per dataset, the best variant of each backend (mean test top-1 over seeds),
    the gap of the best Performer to the best softmax variant (with a Student-t interval over the
    seeds both share, when rpevit.core.stats is available and there are ≥ 2), and the runs' dates and devices.
    A `designed` preset (a pre-registered design) shows no best variant, a choice made after the results:
    its headline is its pre-registered answer (notebook 45's first text)."""
    from ..core.attention import exact_backends
    from ..core.variants import parse_variant

    done = finished(results(found))
    if not done:
        return [
            f"No finished runs yet: run `make study PRESET={preset}` (`python -m rpevit study {preset}`, then "
            f"`python -m rpevit notebooks {preset}`)."
        ]
    lines = []
    if designed:
        lines.append(
            "- A pre-registered study: its answer is its pre-registered contrasts (notebook 45's first text, "
            "`45_design_answer`), analysed on its complete primary seeds; no best variant per backend is picked "
            "after the results."
        )
    for dataset in dict.fromkeys(r.dataset for r in done if not designed):
        by_variant: dict[str, dict[int, float]] = {}
        for r in done:
            if r.dataset == dataset:
                by_variant.setdefault(r.variant, {})[r.seed] = 100 * r.top1
        best: dict[str, tuple[str, float, int]] = {}
        for variant, seeds in by_variant.items():
            backend = parse_variant(variant).backend
            accuracy = statistics.fmean(seeds.values())
            if backend not in best or accuracy > best[backend][1]:
                best[backend] = (variant, accuracy, len(seeds))
        parts = [
            f"{backend}: `{v}` {a:.1f}%" + (f" (mean of {n} seeds)" if n > 1 else "")
            for backend, (v, a, n) in best.items()
        ]
        lines.append(f"- **{dataset}** — best test top-1 per backend: " + "; ".join(parts) + ".")
        exact = next((b for b in exact_backends() if b in best), None)
        performers = {b: v for b, v in best.items() if b not in exact_backends()}
        if exact and performers:
            reference = best[exact][0]
            performer = max(performers.values(), key=lambda item: item[1])[0]
            shared = sorted(set(by_variant[reference]) & set(by_variant[performer]))
            gaps = [by_variant[performer][s] - by_variant[reference][s] for s in shared]
            gap = statistics.fmean(by_variant[performer].values()) - statistics.fmean(by_variant[reference].values())
            direction = "the Performer ahead" if gap > 0 else "the Performer behind"
            lines.append(
                f"  Performer − {exact}, best Performer `{performer}` − best {exact} `{reference}`: {gap:+.1f}".replace(
                    "-", "−"
                )
                + f" points ({direction})"
                + _interval(gaps)
                + "."
            )
    finished_at = sorted(r.finished_at[:10] for r in done if r.finished_at)
    devices = sorted({r.device_name or r.device or "?" for r in done})
    when = (
        (finished_at[0] if finished_at[0] == finished_at[-1] else f"{finished_at[0]} … {finished_at[-1]}")
        if finished_at
        else "date not recorded"
    )
    lines.append(f"- {len(done)} finished runs, trained {when} on {', '.join(devices)}.")
    return lines


def _interval(gaps: list[float]) -> str:
    if len(gaps) < 2:
        return "; one seed, so no interval"
    try:
        from ..core.stats import t_interval
    except ImportError:
        return f"; {len(gaps)} paired seeds"
    ci = t_interval(gaps)
    return f"; 95% t-interval over {ci['n']} paired seeds [{ci['low']:+.1f}, {ci['high']:+.1f}]"


def _title(directory: Path, notebook: str) -> str:
    """The first Markdown heading of an executed notebook, else its name."""
    try:
        cells = json.loads((directory / f"{notebook}.ipynb").read_text())["cells"]
        source = "".join(next(c for c in cells if c["cell_type"] == "markdown")["source"])
        return source.lstrip("# ").splitlines()[0].strip()
    except (OSError, ValueError, KeyError, StopIteration, IndexError):
        return notebook


def report_texts(directory: Path, notebooks: list[str] | None = None) -> list[tuple[dict, str]]:
    """(manifest entry, Markdown) of every text a report's notebooks wrote (Report.text), in order."""
    entries = read_manifest(directory)["notebooks"]
    return [
        (output, (directory / output["files"][0]).read_text().rstrip())
        for notebook in (entries if notebooks is None else notebooks)
        for output in entries.get(notebook, {"outputs": []})["outputs"]
        if output["kind"] == "text" and (directory / output["files"][0]).is_file()
    ]


def _headline_links(directory: Path) -> list[str]:
    """The headline's pointers to the per-variant table (mean ± 95 % interval over seeds) and the answer
    figure, where notebook 45 wrote them."""
    links = [
        f"{what}: [{name}]({name}{suffix})"
        for what, name, suffix in (
            ("every variant's mean test top-1 with its 95 % interval over seeds", "45_variants", ".md"),
            ("the pre-registered answer in one figure", "45_answer_figure", ".png"),
        )
        if (directory / f"{name}{suffix}").is_file()
    ]
    text = "; ".join(links)
    return [f"- {text[:1].upper()}{text[1:]}."] if links else []


def write_index(
    preset: str, notebooks: list[str], root=None, found: list[dict] | None = None, designed_study: bool = False
) -> Path:
    """reports/<preset>/README.md: the headline result, a short guide, then every executed
    notebook with its figures and tables (each table once: its Markdown and CSV on one line)."""
    directory = report_dir(preset, root)
    manifest = read_manifest(directory)
    names = [Path(n).stem for n in notebooks]
    executed = [n for n in names if (directory / f"{n}.ipynb").is_file()]
    texts = report_texts(directory, executed)
    lines = (
        [f"# Report: {preset}", "", "## Headline", ""]
        + headline(found or [], preset, designed=designed_study)
        + _headline_links(directory)
        + [line for output, body in texts for line in ("", f"### {output['caption']}", "", body)]
        + [
            "",
            "## Guide",
            "",
            f"Regenerated by `make study PRESET={preset}` "
            f"(the notebooks alone: `python -m rpevit notebooks {preset}`, which first trains what is missing; "
            f"`python -m rpevit notebooks {preset} --no-train` reports only what has finished, an interim report "
            "of a study still training). "
            "Every figure and table is computed from the run records (in `runs/`, or the copies kept in "
            f"`reports/{preset}/records/`) or by rpevit calls when the "
            "notebooks execute; nothing is typed by hand. Each section below is one executed notebook (open it "
            "for the narrative and the code), followed by what it produced: figures as PNG, interactive figures "
            f"as HTML pages (offline: they load `{PLOTLY_JS}` from this folder), tables as Markdown with the "
            "full-precision CSV beside them.",
        ]
    )
    if (directory / "summary.md").is_file():
        lines += [
            "",
            "- [summary.md](summary.md) · [summary.csv](summary.csv) — one row per run, every metric "
            "(written by the study runner).",
        ]
    for notebook in executed:
        entry = manifest["notebooks"].get(notebook, {"outputs": []})
        lines += ["", f"## [{_title(directory, notebook)}]({notebook}.ipynb)", ""]
        outputs = [o for o in entry["outputs"] if all((directory / f).is_file() for f in o["files"])]
        if not outputs:
            lines.append("No figures or tables (see the notebook for why).")
        for output in outputs:
            links = " · ".join(f"[{Path(f).suffix.lstrip('.')}]({f})" for f in output["files"])
            lines.append(f"- {output['kind']} **{output['name']}** ({links}) — {output['caption']}")
    path = directory / "README.md"
    records.write_text(path, "\n".join(lines) + "\n")
    return path
