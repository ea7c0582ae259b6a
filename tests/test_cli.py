"""The command line: user mistakes give one clear `error:` line, exit status 2, no traceback."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import rpevit.core.data as data_lib
from rpevit.cli import main

ROOT = Path(__file__).resolve().parent.parent


def run_main(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_list_shows_variants_datasets_presets(capsys):
    code, out, _ = run_main(capsys, "list")
    assert code == 0
    assert "softmax+ape" in out and "mnist5k" in out and "smoke" in out


def test_bad_yaml_key(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("datasets: [mnist5k]\nvariants: [softmax+ape]\nmodel: {depht: 4}\n")
    code, _, err = run_main(capsys, "study", str(bad))
    assert code == 2
    assert err.startswith("error: ") and "unknown key model.depht; allowed keys: patch_size, dim, depth" in err
    assert err.count("\n") == 1


def test_unknown_variant(capsys):
    code, _, err = run_main(capsys, "train", "--params", "smoke", "--variant", "softmax+alibi9")
    assert code == 2 and "unknown positional method 'alibi9'" in err and "choose from none, ape" in err


def test_missing_dataset_lists_paths_and_hint(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(data_lib.files, "SYSTEM_ROOT", tmp_path / "system")
    monkeypatch.setenv("RPEVIT_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    code, _, err = run_main(
        capsys, "train", "--params", "fashion_mnist", "--variant", "softmax+ape", "--data-root", str(tmp_path)
    )
    assert code == 2
    assert "fashion_mnist" in err and "apt-get install dataset-fashion-mnist" in err
    assert str(tmp_path / "env") in err and str(tmp_path / "system") in err
    assert "train-images-idx3-ubyte" in err


def test_train_checks_the_study_precision_before_it_loads_data(capsys, tmp_path, monkeypatch):
    import rpevit.lab.schedule.study
    from rpevit.core.errors import UserError

    def refuse(params, run):
        raise UserError(f"refused {run.variant} seed {run.seed} of {params.name}")

    monkeypatch.setattr(rpevit.lab.schedule.study, "check_run_precision", refuse)
    code, _, err = run_main(
        capsys, "train", "--params", "fashion_mnist", "--variant", "softmax+ape", "--seed", "2",
        "--data-root", str(tmp_path),
    )  # fmt: skip
    assert code == 2 and err == "error: refused softmax+ape seed 2 of fashion_mnist\n"  # not the missing data


def test_truncated_dataset_file(capsys, tmp_path):
    folder = tmp_path / "fashion-mnist"
    folder.mkdir()
    header = (2051).to_bytes(4, "big") + (60000).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    with gzip.open(folder / "train-images-idx3-ubyte.gz", "wb") as handle:
        handle.write(header + bytes(1000))  # far fewer pixels than the header promises
    labels = (2049).to_bytes(4, "big") + (60000).to_bytes(4, "big") + bytes(60000)
    for name, payload in [
        ("train-labels-idx1-ubyte.gz", labels),
        ("t10k-images-idx3-ubyte.gz", header[:4] + (10000).to_bytes(4, "big") + header[8:] + bytes(10000 * 784)),
        ("t10k-labels-idx1-ubyte.gz", labels[:4] + (10000).to_bytes(4, "big") + bytes(10000)),
    ]:
        with gzip.open(folder / name, "wb") as handle:
            handle.write(payload)
    code, _, err = run_main(
        capsys, "train", "--params", "fashion_mnist", "--variant", "softmax+ape", "--data-root", str(tmp_path)
    )
    assert code == 2 and "train-images-idx3-ubyte.gz" in err
    assert "truncated" in err or "corrupt" in err


def test_module_entry_point_exit_code():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "rpevit", "study", "no_such_preset"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: no preset file 'no_such_preset'")
    assert "Traceback" not in result.stderr


def test_a_negative_seed_is_refused_before_training(capsys, tmp_path, monkeypatch):

    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))
    code, out, err = run_main(capsys, "train", "--params", "smoke", "--variant", "softmax+ape", "--seed", "-1")
    assert code == 2 and err == "error: --seed: -1 is not valid; seeds must be integers ≥ 0.\n" and out == ""
    assert not (tmp_path / "runs").exists()


def test_an_unknown_backend_to_capture_is_refused_before_training(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))
    code, out, err = run_main(capsys, "study", "smoke", "--capture-only", "favour")
    assert code == 2 and err.startswith("error: train.compile_backends: 'favour' is not valid; it must be one of")
    assert err.count("\n") == 1 and not (tmp_path / "runs").exists()


def test_capture_only_sets_the_backends_a_study_compiles():
    from rpevit.cli import _params, build_parser

    args = build_parser().parse_args(["study", "smoke", "--capture-only", "favor, relu"])
    train = _params(args).train
    assert train.compile and train.compile_backends == ("favor", "relu")
    assert not _params(build_parser().parse_args(["study", "smoke"])).train.compile


def test_a_pre_registered_preset_refuses_uncommitted_code_unless_allowed(monkeypatch, capsys):
    """Every run of a pre-registered preset comes from a clean, named revision; --allow-dirty overrides."""
    from rpevit import cli
    from rpevit.lab import params, revision

    assert params.preregistered("canvas40_long") and params.preregistered("recall_pilot")
    assert not params.preregistered("smoke") and not params.preregistered("no_such_preset")
    monkeypatch.setattr(revision, "code_revision", lambda: "0123456789abcdef0123+dirty")
    assert cli.main(["study", "canvas40_long"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: canvas40_long is pre-registered") and "--allow-dirty" in err[0]
    params.check_clean_revision("canvas40_long", allow_dirty=True)  # allowed: no error
    params.check_clean_revision("smoke", allow_dirty=False)  # not pre-registered: no error
    monkeypatch.setattr(revision, "code_revision", lambda: "0123456789abcdef0123")
    params.check_clean_revision("canvas40_long", allow_dirty=False)  # clean: no error


def test_the_reproduction_line_compares_each_run_with_the_committed_summary(tmp_path, monkeypatch):
    """`status --reproduced`: bit for bit, or which runs differ and by how much, read against the committed
    reports/<preset>/summary.csv (make study's last line)."""
    from rpevit.lab.params import PROJECT_ROOT, load_params
    from rpevit.lab.result import Result
    from rpevit.lab.schedule import reproduction

    params = load_params("smoke")
    folder = tmp_path / "smoke"
    folder.mkdir()
    rows = "dataset,variant,seed,status,top1,threads\n" + "".join(
        f"mnist5k,{v},0,finished,{t},1\n" for v, t in (("softmax+ape", 0.622), ("favor+ape", 0.75))
    )
    (folder / "summary.csv").write_text(rows)

    def runs(top1s, device=None, names=()):
        records = [
            {"dataset": "mnist5k", "variant": v, "seed": 0, "status": "finished", "top1": t, "device_name": device,
             "device_names": list(names)}
            for v, t in top1s
        ]  # fmt: skip
        monkeypatch.setattr(reproduction, "trained_here", lambda p: [Result.of(r) for r in records])

    runs([("softmax+ape", 0.622), ("favor+ape", 0.75)])
    assert reproduction.reproduction_line(params, tmp_path).startswith("reproduced: the test top-1 of all 2 runs")
    runs([("softmax+ape", 0.596), ("favor+ape", 0.75)])
    line = reproduction.reproduction_line(params, tmp_path)
    assert line.startswith("not reproduced here: 1 of 2 runs differ") and "|Δ top-1| 0.0260, softmax+ape seed 0" in line
    assert "the committed runs used 1 thread(s), this one" in line  # no kept records, no device named: none said
    # the CPUs are named where the records say: the committed runs' in their kept records, this machine's in its own
    kept = folder / "records" / "mnist5k" / "softmax+ape" / "seed0"
    kept.mkdir(parents=True)
    committed = json.loads((PROJECT_ROOT / "reports/smoke/records/mnist5k/softmax+ape/seed0/record.json").read_text())
    (kept / "record.json").write_text(json.dumps({**committed, "device_name": "AMD EPYC"}))
    runs([("softmax+ape", 0.596), ("favor+ape", 0.75)], device="Intel(R) Xeon(R) Processor")
    line = reproduction.reproduction_line(params, tmp_path)
    assert "used 1 thread(s) on AMD EPYC, this one OMP_NUM_THREADS=" in line
    assert line.endswith(" on Intel(R) Xeon(R) Processor: float results depend on the CPU, torch build and threads.")
    # a run here resumed on two machines names both (its record's list; 'unrecorded' is no machine)
    runs([("softmax+ape", 0.596)], device="Intel Xeon", names=["unrecorded", "AMD EPYC", "Intel Xeon"])
    assert " on AMD EPYC, Intel Xeon: float results" in reproduction.reproduction_line(params, tmp_path)
    assert "no committed summary" in reproduction.reproduction_line(params, tmp_path / "nowhere")


def test_the_reproduction_line_reads_this_machines_runs_not_the_kept_copies(tmp_path, monkeypatch):
    """The committed smoke reference keeps its records in reports/smoke/records/: they are the committed numbers,
    so a machine that trained nothing has nothing to compare (never "reproduced" by reading them back)."""
    from rpevit.lab.params import load_params
    from rpevit.lab.schedule import reproduction
    from rpevit.lab.store import catalog

    monkeypatch.setenv("RPEVIT_RUNS", str(tmp_path / "runs"))
    params = load_params("smoke")
    assert len(catalog.study_records(params)) == 6  # the kept copies are there
    assert reproduction.trained_here(params) == []
    assert reproduction.reproduction_line(params).startswith("reproduction: none of this machine's finished runs")
