"""Runs to inspect: a preset's finished runs whose weights are on this machine or kept in the
repository (one per variant and dataset), or — before any — its variants at their untrained init
(`inspection_targets`); their datasets, models, test images and per-image attention maps
(`MapSource`). Performer backends never form the N×N matrix when they run; these maps are the
matrices they imply (`ViT.attention_maps`), exactly what multiplies v."""

from __future__ import annotations

import functools

import torch

from rpevit.core.data import normalize
from rpevit.core.errors import UserError
from rpevit.core.variants import parse_variant
from rpevit.lab.result import results
from rpevit.lab.store.run import Run


def inspection_targets(
    params, found: list[dict], seed: int = 0, has_weights=None, every_seed: bool = False
) -> list[dict]:
    """What to inspect: one finished run per variant and dataset (its lowest seed; `every_seed`: each
    seed, for the explorer's choice) among `found` whose weights can be loaded here (`has_weights(record)`,
    default runs.inspectable_here: a checkpoint here or weights kept in the repository), or — when
    there is none — every variant × dataset of the preset at init (seed `seed`). Each target:
    variant, dataset, seed, record (None: untrained) and a label naming it."""
    from rpevit.lab.training.runs import inspectable

    first = inspectable(params, found, has_weights, every_seed)
    if first:
        return [
            {
                "variant": r.variant,
                "dataset": r.dataset,
                "seed": r.seed,
                "record": r,
                "label": f"{r.variant} · {r.dataset} · seed {r.seed} (test top-1 {100 * r.top1:.1f}%, {r.epochs} ep)",
            }
            for r in results(first)
        ]
    return [
        {
            "variant": parse_variant(v).name,
            "dataset": d,
            "seed": seed,
            "record": None,
            "label": f"{parse_variant(v).name} · {d} (untrained, seed {seed})",
        }
        for d in params.datasets
        for v in params.variants
    ]


def test_images(dataset, start: int, count: int):
    """(normalised images (B, C, H, W), raw images in [0, 1], labels) of test images start … start+count−1."""
    split = dataset.test
    index = torch.arange(start, min(start + count, len(split)))
    raw = split.images[index].float().cpu() / 255
    return normalize(raw, dataset.info), raw, split.labels[index].cpu()


class MapSource:
    """The runs of a preset to inspect, with their datasets, models and attention maps (cached).

    `targets` maps each label to its target (see `inspection_targets`); targets whose dataset is not
    available on this machine are left out, with a message naming it.
    """

    def __init__(
        self, params, found: list[dict], seed: int = 0, device="cpu", max_models: int = 8, every_seed: bool = False
    ):
        from rpevit.lab.training import runs

        self.params, self.device, self._runs = params, torch.device(device), runs
        self.datasets, self.missing = {}, []  # missing: datasets whose files are not on this machine
        targets = inspection_targets(params, found, seed, every_seed=every_seed)
        for name in dict.fromkeys(t["dataset"] for t in targets):
            try:
                self.datasets[name] = runs.dataset_for(params, name, device="cpu")
            except UserError as exc:
                self.missing.append(name)
                print(f"Dataset {name} is not available here, so its runs are left out.\n{exc}")
        self.targets = {t["label"]: t for t in targets if t["dataset"] in self.datasets}
        self.note = runs.weightless_note(params, found)
        self.trained = any(t["record"] is not None for t in self.targets.values())
        self.model = functools.lru_cache(maxsize=max_models)(self._model)
        self.image_maps = functools.lru_cache(maxsize=64)(self._image_maps)

    def _model(self, label: str):
        """The trained model of a finished run (best-validation weights), or the variant at init."""
        target = self.targets[label]
        run = Run(self.params, target["dataset"], target["variant"], target["seed"])
        if target["record"] is not None:
            model, _ = self._runs.inspected_model(run, device=self.device)
            return model
        return self._runs.untrained_model(run, device=self.device)

    def dataset(self, label: str):
        return self.datasets[self.targets[label]["dataset"]]

    def images(self, label: str, start: int, count: int):
        """Test images of the target's dataset, as `test_images`."""
        return test_images(self.dataset(label), start, count)

    @torch.no_grad()
    def maps(self, label: str, images):
        """(per-layer attention maps (B, heads, T, T) on the CPU, the token grid, predictions (B,))."""
        model = self.model(label)
        images = images.to(self.device)
        maps = [m.float().cpu() for m in model.attention_maps(images)]
        return maps, model.grid_for(images), model(images).argmax(-1).cpu()

    def _image_maps(self, label: str, index: int) -> dict:
        """One test image: maps per layer (heads, T, T) as numpy, grid, RGB picture (H, W, 3) uint8,
        label and prediction."""
        images, raw, labels = self.images(label, index, 1)
        maps, grid, predictions = self.maps(label, images)
        picture = (raw[0] * 255).round().to(torch.uint8).permute(1, 2, 0).expand(-1, -1, 3).numpy()
        info = self.dataset(label).info
        return {
            "maps": [m[0].numpy() for m in maps],
            "grid": grid,
            "picture": picture,
            "truth": int(labels[0]),
            "prediction": int(predictions[0]),
            "truth_name": info.class_name(int(labels[0])),
            "prediction_name": info.class_name(int(predictions[0])),
            "trained": self.targets[label]["record"] is not None,
        }

    def banner(self, label: str) -> str:
        """HTML for the explorer's widget area: a red UNTRAINED banner when the run's weights are its
        init (nothing once trained weights are shown)."""
        if self.targets[label]["record"] is not None:
            return ""
        return (
            '<div style="background:#b00020;color:white;font-weight:bold;padding:6px 10px;border-radius:4px">'
            "UNTRAINED: random init weights (no finished run with its checkpoint here) — these maps show the "
            "architecture's prior, not what a model learned.</div>"
        )
