"""Checks of a whole preset beyond each value's type (rpevit/lab/params.py builds the values): the grid has
no duplicates, datasets exist and fit the patch size, evaluation resolutions and the training subset fit
the datasets, seeds are ≥ 0, a design and its longer-budget check are consistent. Each failure is one
UserError naming the key, the bad value and what is allowed."""

from __future__ import annotations

import dataclasses

from ..core.config import validate_model
from ..core.errors import UserError
from .design import check_design


def _no_duplicates(key: str, values, canonical) -> None:
    """One UserError if two entries of a grid axis name the same thing (spelled alike or not)."""
    seen: dict = {}
    for value in values:
        name = canonical(value)
        if name in seen:
            same = f" (both are {name})" if str(seen[name]) != str(value) else ""
            raise UserError(f"{key}: {seen[name]!r} and {value!r} are the same entry{same}; list each once.")
        seen[name] = value


def validate(params, read_preset, load_preset) -> None:
    """Every check of a preset, in order; the first failure raises its UserError. `read_preset(name)`
    gives another preset's raw YAML and `load_preset(name)` its Params (for a design's plateau check)."""
    from ..core.data import dataset_info
    from ..core.variants import parse_variant

    for name in params.datasets:
        try:
            dataset_info(name)
        except UserError as exc:
            raise UserError(f"datasets: {exc}") from None
    for variant in params.variants:
        try:
            parse_variant(variant)
        except UserError as exc:
            raise UserError(f"variants: {exc}") from None
    if not params.datasets or not params.variants or not params.seeds:
        raise UserError("datasets, variants and seeds must each list at least one entry.")
    _no_duplicates("datasets", params.datasets, str)
    _no_duplicates("variants", params.variants, lambda v: parse_variant(v).name)
    _no_duplicates("seeds", params.seeds, int)
    if negative := [s for s in params.seeds if s < 0]:
        raise UserError(f"seeds: {negative[0]} is not valid; seeds must be integers ≥ 0.")
    validate_model(params.model)
    params.train.check()
    if params.data.augment != "auto":
        from ..core.data.pipeline import recipe_steps

        try:
            recipe_steps(params.data.augment)
        except UserError as exc:
            raise UserError(f"data.augment: {exc}") from None
    if params.data.train_size is not None and params.data.train_size < 1:
        raise UserError(
            f"data.train_size: {params.data.train_size} is not valid; it must be a positive integer "
            "or null for the whole training split."
        )
    if params.data.val_size is not None and params.data.val_size < 1:
        raise UserError(
            f"data.val_size: {params.data.val_size} is not valid; it must be a positive integer "
            "or null for the default."
        )
    _check_train_size(params)
    patch = params.model.patch_size
    for name in params.datasets:
        size = dataset_info(name).image_size
        if size % patch:
            raise UserError(
                f"model.patch_size: {patch} does not divide the {size}×{size} images of {name}; "
                "choose a patch size that divides the image size."
            )
    grid = {parse_variant(v).name for v in params.variants}
    check_design(params.design, params.variants, params.seeds)
    _check_plateau_check(params, read_preset, load_preset)
    _check_reference(params, load_preset)
    _check_continues(params, load_preset)
    strays = [v for v in params.evaluate.variants if parse_variant(v).name not in grid]
    if strays:
        raise UserError(
            f"evaluate.variants: {', '.join(strays)} not in this preset's variants; list variants of the grid "
            "(or none, to evaluate all)."
        )
    bad = [r for r in params.evaluate.resolutions if r < patch or r % patch]
    if bad:
        raise UserError(
            f"evaluate.resolutions: {bad} are not positive multiples of model.patch_size = {patch}; "
            "list image sizes divisible by the patch size."
        )
    smallest = min(dataset_info(name).image_size for name in params.datasets)
    if huge := [r for r in params.evaluate.resolutions if r > MAX_RESOLUTION_FACTOR * smallest]:
        raise UserError(
            f"evaluate.resolutions: {huge} exceed {MAX_RESOLUTION_FACTOR}× the {smallest}×{smallest} images of this "
            f"preset's datasets; list image sizes up to {MAX_RESOLUTION_FACTOR * smallest}."
        )


MAX_RESOLUTION_FACTOR = 8  # evaluate.resolutions: at most this many times a dataset's image size


def _check_train_size(params) -> None:
    """data.train_size must not exceed the training images of a dataset (counted without reading them)."""
    from ..core.data import training_images

    if params.data.train_size is None:
        return
    for name in params.datasets:
        try:
            available = training_images(name, params.data.val_size)
        except TypeError:  # a dataset without a known training-split size: checked when it loads
            continue
        if params.data.train_size > available:
            raise UserError(
                f"data.train_size: {params.data.train_size} exceeds the {available} training images of {name}; "
                "give at most that many, or null for the whole training split."
            )


def _check_plateau_check(params, read_preset, load_preset) -> None:
    """design.plateau_check names a preset that trains this design's primary variants, with the same
    data, model and optimiser, for more epochs on some of its seeds (and has no check of its own)."""
    from ..core.variants import parse_variant

    name = params.design.plateau_check
    if not name:
        return
    where = f"design.plateau_check ({name})"
    raw = read_preset(name)
    if isinstance(raw, dict) and (raw.get("design") or {}).get("plateau_check"):
        raise UserError(f"{where}: that preset names a plateau check of its own; a check cannot have one.")
    try:
        check = load_preset(name)
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None

    def names(variants):
        return sorted(parse_variant(v).name for v in variants)

    same_recipe = (check.data, check.model, dataclasses.replace(check.train, epochs=params.train.epochs))
    problems = [
        (check.name == params.name, "have a name of its own (its runs and records would overwrite this study's)"),
        (names(check.design.primary) != names(params.design.primary), "train exactly this design's primary variants"),
        (check.datasets != params.datasets, f"use the datasets {params.datasets}"),
        (not set(check.seeds) <= set(params.seeds), "use seeds of this preset (the runs are paired by seed)"),
        (check.train.epochs <= params.train.epochs, f"train more than {params.train.epochs} epochs"),
        (same_recipe != (params.data, params.model, params.train), "change nothing but train.epochs"),
    ]
    wrong = [what for bad, what in problems if bad]
    if wrong:
        raise UserError(f"{where}: a longer-budget check must {'; '.join(wrong)}.")


def referenced_variants(params, reference) -> list[str]:
    """The reference preset's variants that `params` reads instead of training (those it does not list)."""

    return [v for v in reference.variants if v not in params.variants]  # both stored canonical


def _other_preset(params, key: str, not_itself: str, load_preset):
    """(where, preset): the other preset this preset's `key` names, loaded, or None when it names none;
    one UserError if it names this preset or one that does not load."""
    name = getattr(params, key)
    if not name:
        return None
    where = f"{key} ({name})"
    if name == params.name:
        raise UserError(f"{where}: {not_itself}; name another preset.")
    try:
        return where, load_preset(name)
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None


def _check_reference(params, load_preset) -> None:
    """`reference` names another preset with kept records, on the same datasets and (at least) these
    seeds, that trains a variant this preset does not list. That its runs have the keys this preset's
    would have (same data, training and model settings as far as the variant reads them) is checked
    where runs are known (catalog.reference_records)."""
    found = _other_preset(params, "reference", "a preset cannot read its own records as its reference", load_preset)
    if found is None:
        return
    where, reference = found
    problems = [
        (reference.reference is not None, "read nothing from a reference of its own"),
        (not reference.keep_records, "keep its records (keep_records: true)"),
        (reference.datasets != params.datasets, f"use the datasets {list(params.datasets)}"),
        (not set(params.seeds) <= set(reference.seeds), f"train the seeds {list(params.seeds)} (runs pair by seed)"),
        (not referenced_variants(params, reference), "train a variant this preset does not list (one to read)"),
    ]
    wrong = [what for bad, what in problems if bad]
    if wrong:
        raise UserError(f"{where}: a reference preset must {'; '.join(wrong)}.")


def _check_continues(params, load_preset) -> None:
    """`continues` names another WSD preset with fewer epochs whose runs this preset's runs go on from
    (rpevit/lab/training/continuation.py): these datasets, variants and seeds among its own, its stable phase
    ending no later than this one's, and each budget of this preset that branches before that point
    among its budgets (its cool-down happened there). Equal keys but for epochs and budgets are checked
    where runs are known (continuation.check_donor_runs)."""
    from ..core.budgets import branch_epoch, stable_end
    from ..core.variants import parse_variant

    found = _other_preset(params, "continues", "a preset cannot go on from its own runs", load_preset)
    if found is None:
        return
    where, donor = found
    mine, theirs = params.train, donor.train
    if mine.schedule != "wsd" or theirs.schedule != "wsd":
        raise UserError(f"{where}: both presets need train.schedule: wsd (a stable phase to go on from).")
    start = stable_end(theirs)
    early = [b for b in mine.budgets if branch_epoch(b, mine.decay_fraction) < start and b not in theirs.budgets]
    problems = [
        (theirs.epochs >= mine.epochs, f"train fewer epochs than this preset's {mine.epochs}"),
        (start > stable_end(mine), f"end its stable phase by this preset's epoch {stable_end(mine)}"),
        (not set(params.datasets) <= set(donor.datasets), f"use the datasets {list(params.datasets)}"),
        (not set(params.seeds) <= set(donor.seeds), f"train the seeds {list(params.seeds)}"),
        (
            not {parse_variant(v).name for v in params.variants} <= {parse_variant(v).name for v in donor.variants},
            f"train the variants {list(params.variants)}",
        ),
        (bool(early), f"list the budgets {early} (their cool-downs branch before its epoch {start})"),
    ]
    wrong = [what for bad, what in problems if bad]
    if wrong:
        raise UserError(f"{where}: the preset to go on from must {'; '.join(wrong)}.")
