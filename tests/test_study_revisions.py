"""A pre-registered study that is still training has runs from several code revisions: each record names its
own and the report lists them. Here the code of every revision its kept records name trains a short run of
each of its variants exactly as the current code does (a run resumed across sittings lists every revision it
trained under, in its record and its parked checkpoint) — the record's results (top-1, predictions, likelihood,
best epoch, run key) and every epoch's losses and accuracies, bit for bit at one thread — so a change to the
package while such a study runs is shown output-identical (or this fails and names the run that moved).

Revisions whose rpevit/ is the same tree (git's hash of the folder) train as one: the code run is that folder
and nothing else, so one of them stands for all, and one whose tree is the working tree's needs no training.
The short runs read Fashion-MNIST cut to its first 2,000 training and 1,000 test images: testing the full
10,000 images twice (a cool-down budget and the run) was most of a short run's time."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import pytest
import torch
import yaml

from rpevit.core.data import load_dataset
from rpevit.core.data.files import _existing_idx_file, _locate_idx, search_roots
from rpevit.core.data.readers import _read_bytes
from rpevit.lab import hooks
from rpevit.lab.params import load_params, preregistered
from rpevit.lab.revision import UNRECORDED
from rpevit.lab.schedule.wanted import snapshot, wanted
from rpevit.lab.schema import result_view

ROOT = Path(__file__).resolve().parents[1]
TIMED = ("second", "time", "load")  # fields that measure the machine, not the run
CUT = {"train": 2000, "t10k": 1000}  # the images a short run's Fashion-MNIST keeps of each official split


def untimed(value):
    """The value with every field that measures the machine dropped, at any depth (a budget's history too)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if not any(word in k for word in TIMED)}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def studies_in_flight() -> list[str]:
    """Pre-registered presets with kept records that still want runs (wanted: the design's decisions) which
    no start gate refuses (a spent budget, a pilot order: rpevit.lab.hooks)."""
    found, roots = [], {"runs_root": ROOT / "no-runs", "reports_root": ROOT / "reports"}
    for path in sorted((ROOT / "params").glob("*.yaml")):
        params = load_params(path.stem)
        if preregistered(path.stem) and params.keep_records and (ROOT / "reports" / path.stem / "records").is_dir():
            if wanted(params, snapshot(params, **roots)).left and not hooks.refusal(params, **roots):
                found.append(path.stem)
    return found


def kept_revisions(preset: str) -> set[str]:
    """Every revision the study's kept records and parked checkpoints name (a resumed run lists each)."""
    named = []
    for path in (ROOT / "reports" / preset / "records").rglob("record.json"):
        record = json.loads(path.read_text())
        named += [record["code_revision"], *record.get("code_revisions", [])]
    for path in (ROOT / "reports" / preset / "parked").rglob("checkpoint*.pt"):
        named += torch.load(path, map_location="cpu", weights_only=False).get("revisions", [])
    return {rev.removesuffix("+dirty") for rev in named if rev and rev != UNRECORDED}


def cut_fashion_mnist(folder: Path) -> Path | None:
    """A data root holding Fashion-MNIST's IDX files cut to their first CUT images (uncompressed, which the
    reader prefers), or None where this machine has no Fashion-MNIST to cut."""
    source = _locate_idx("fashion_mnist", search_roots(), [])
    if source is None:
        return None
    target = folder / "fashion-mnist"
    target.mkdir(parents=True, exist_ok=True)
    for split, count in CUT.items():
        for kind, item in (("images-idx3", 28 * 28), ("labels-idx1", 1)):
            stem, header = f"{split}-{kind}-ubyte", 16 if kind.startswith("images") else 8
            cut_already = target / stem  # every preset's short run shares the folder; a torn file is cut again
            if cut_already.is_file() and cut_already.stat().st_size == header + count * item:
                continue
            data = _read_bytes(_existing_idx_file(source, stem))
            cut = data[:4] + count.to_bytes(4, "big") + data[8:header] + data[header : header + count * item]
            (target / stem).write_bytes(cut)
    return folder


def short_preset(preset: str, folder: Path) -> Path:
    """The preset cut to a short run: its model, recipe and schedule kind, on 256 training images of its
    first dataset (Fashion-MNIST read from a cut copy where there is one), 3 epochs (a cool-down budget of 2
    where it has budgets; FAVOR+ redraws every 2 steps where it redraws), one seed, inference timed on 16
    images (a neutral setting); without its reference preset, which only names the runs a report reads and
    would have to list the same datasets."""
    spec = yaml.safe_load((ROOT / "params" / f"{preset}.yaml").read_text())
    spec.pop("design", None)
    spec.pop("reference", None)  # which runs a report reads; a short run trains the same without it
    spec.update(name=f"{preset}_short", keep_records=False, datasets=spec["datasets"][:1], seeds=spec["seeds"][:1])
    spec["data"] = {**spec.get("data", {}), "train_size": 256, "val_size": 128}
    if root := cut_fashion_mnist(folder / "data"):
        spec["data"]["root"] = str(root)  # a neutral setting: where the files are
    spec["train"] = {**spec["train"], "epochs": 3, "warmup_epochs": 1, "timing_images": 16}
    if spec["train"].get("budgets"):
        spec["train"]["budgets"] = [2]
    if any(variant.startswith("favor_redraw+") for variant in spec["variants"]):
        spec["model"]["favor_redraw"] = {**spec["model"].get("favor_redraw", {}), "redraw_steps": 2}
    path = folder / f"{preset}_short.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def train(code: Path, preset: Path, variant: str, seed: int, out: Path) -> tuple[dict, list[dict]]:
    """Train one run with the package found in `code` (a folder holding rpevit/); its record's results and
    its history without the timed columns."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RPEVIT_RUNS": str(out / "runs"), "RPEVIT_REPORTS": str(out)}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rpevit",
            "train",
            "--params",
            str(preset),
            "--variant",
            variant,
            "--seed",
            str(seed),
            "--no-progress",
        ],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    (record,) = (out / "runs").rglob("record.json")
    with open(record.with_name("history.csv"), newline="") as rows:
        history = list(csv.DictReader(rows))
    return untimed(result_view(json.loads(record.read_text()))), untimed(history)


def checkout(revision: str, folder: Path) -> Path | None:
    """rpevit/ as it was at `revision`, unpacked into folder; None when git does not hold it."""
    archive = subprocess.run(["git", "archive", revision, "rpevit"], cwd=ROOT, capture_output=True)
    if archive.returncode != 0:
        return None
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def rpevit_tree(revision: str | None) -> str | None:
    """git's hash of rpevit/ at `revision`, or of the working tree's (uncommitted changes included) for None;
    None where git does not hold the revision (a shallow clone)."""
    if revision is not None:
        done = subprocess.run(["git", "rev-parse", f"{revision}:rpevit"], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None
    with tempfile.TemporaryDirectory() as index:  # a scratch index: the real one is left as it is
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(index) / "index")}
        for command in (["read-tree", "HEAD"], ["add", "-A", "rpevit"], ["write-tree", "--prefix=rpevit/"]):
            done = subprocess.run(["git", *command], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def revisions_by_tree(revisions) -> tuple[dict[str, list[str]], list[str]]:
    """The revisions grouped by their rpevit/ tree, less the working tree's (its code is the current code);
    and the revisions git does not hold here."""
    now, groups, unheld = rpevit_tree(None), {}, []
    for revision in sorted(revisions):
        tree = rpevit_tree(revision)
        if tree is None:
            unheld.append(revision)
        elif tree != now:
            groups.setdefault(tree, []).append(revision)
    return groups, unheld


def unheld_revisions(preset: str, folder: Path) -> list[str]:
    """Train the short runs of `preset` with the code of each rpevit/ tree its kept records' revisions name
    and with the current code, and assert they agree; the revisions git does not hold here, which it cannot
    check."""
    short = short_preset(preset, folder)
    params = load_params(str(short))
    variants, seed = params.variants, params.seeds[0]
    groups, unheld = revisions_by_tree(kept_revisions(preset))
    now = {v: train(ROOT, short, v, seed, folder / "now" / v) for v in variants} if groups else {}
    for revisions in groups.values():
        code = checkout(revisions[0], folder / revisions[0])
        named = ", ".join(revision[:12] for revision in revisions)
        for variant in variants:
            then = train(code, short, variant, seed, folder / revisions[0] / "runs" / variant)
            assert then == now[variant], f"{preset}: {variant} trains otherwise than at {named} (one rpevit/ tree)"
    return unheld


def test_every_pre_registered_study_cuts_to_a_short_run_that_loads(tmp_path):
    """The slow test below cuts whichever studies are in flight when it runs; every pre-registered preset
    that keeps records must cut to a preset that loads (a reference preset once broke it), so a study
    entering flight cannot."""
    kept = [p.stem for p in sorted((ROOT / "params").glob("*.yaml")) if preregistered(p.stem)]
    kept = [name for name in kept if load_params(name).keep_records]
    assert "canvas40_long" in kept and "recall_pilot_favor8" in kept
    for preset in kept:
        params = load_params(str(short_preset(preset, tmp_path)))
        assert (params.train.epochs, params.seeds, len(params.datasets)) == (3, params.seeds[:1], 1), preset
    if params.data.root is not None:  # this machine has Fashion-MNIST: the short runs read the cut copy
        cut = load_dataset("fashion_mnist", root=params.data.root, val_size=128)
        assert (len(cut.test.labels), len(cut.train.labels) + len(cut.val.labels)) == (CUT["t10k"], CUT["train"])
        assert cut.source == str(Path(params.data.root) / "fashion-mnist")
        torn = Path(params.data.root) / "fashion-mnist" / "t10k-labels-idx1-ubyte"
        torn.write_bytes(torn.read_bytes()[:100])  # a cut torn by a killed test is cut again, not reused
        cut_fashion_mnist(Path(params.data.root))
        assert torn.stat().st_size == 8 + CUT["t10k"]


@pytest.mark.slow
def test_every_revision_a_study_in_flight_trained_from_trains_as_the_current_code(tmp_path):
    """Which studies are in flight is decided here, not at collection: the fast suite reads no preset for it."""
    unheld = []
    for preset in studies_in_flight():
        (tmp_path / preset).mkdir()
        unheld += [f"{preset} at {revision}" for revision in unheld_revisions(preset, tmp_path / preset)]
    if unheld:
        pytest.skip(f"git does not hold these revisions here (a shallow clone?): {', '.join(unheld)}")
