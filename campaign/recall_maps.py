"""Where a recall model's query looks: attention of the query cell's token and of CLS, per layer, on the
recall task's test images (rpevit/core/data/recall.py), for each variant's kept model of one seed.

The answer needs the query (a copy of one key over an all-on bottom half) to find the matching key cell
(the content hop) and, on the neighbour layout, the value in the cell to that key's right (the
positional hop), and CLS to carry it to the head. Measured per layer, heads averaged, over the first
200 test images: the attention weight the query token puts on the matching key's token and, for
comparison, on another pair's key; the weight CLS puts on the asked value's token and on another pair's
value (a model that has found the answer puts more on its own key and value than on the others; uniform
attention puts 1/T on each, T = G² + 1 tokens); and the weight the matching key's token and another
pair's key token put on the query. A model can answer without the query looking anything up: every key
cell reads the one marked query cell, compares it with its own key, and CLS reads the cell that matched:
one salient token to find at each step. The lookup that strains a linear attention's fixed-size state, one
key picked among K by content (Arora et al. 2023, "Zoology"), is not needed on that route. The figure shows
one test image.
"""

from __future__ import annotations

import statistics

import torch

from rpevit.core.data.recall import QUERY_MARK, cells_of, codebook

MAPS_FIGURE, MAPS_TABLE, EXAMPLES = "recall_maps.png", "recall_attention", 200


def places(image: torch.Tensor, grid: int, layout: str) -> dict:
    """The cells of one uint8 recall image (1, 4G, 4G), row-major: `query`, the matching `key` and its `value`
    (right of the key on the neighbour layout, the key's own cell on the same-cell one), and the
    `other_keys` and `other_values` of the pairs not asked about."""
    top, bottom = cells_of(image.unsqueeze(0), grid)
    top, bottom = top[0], bottom[0]
    glyphs = codebook()
    query = int((bottom == QUERY_MARK).all(dim=1).nonzero()[0])
    is_key = (top.unsqueeze(1) == glyphs["keys"].unsqueeze(0)).all(dim=2).any(dim=1)
    is_value = (bottom.unsqueeze(1) == glyphs["values"].unsqueeze(0)).all(dim=2).any(dim=1)
    is_key[query] = False
    key = int(((top == top[query]).all(dim=1) & is_key).nonzero()[0])
    value = key + 1 if layout == "neighbour" else key
    return {
        "query": query,
        "key": key,
        "value": value,
        "other_keys": [int(c) for c in is_key.nonzero().flatten() if int(c) != key],
        "other_values": [int(c) for c in is_value.nonzero().flatten() if int(c) != value],
    }


def attention_rows(model, images: torch.Tensor, spots: list[dict[str, int]]) -> list[dict[str, torch.Tensor]]:
    """Per layer, heads averaged: the query token's and CLS's attention rows (B, T), token 0 being CLS, and the
    weight each token puts on the query (`to query`, B × T)."""
    rows = []
    for weights in model.attention_maps(images):
        mean = weights.float().mean(dim=1)  # (B, T, T)
        queries = torch.stack([mean[b, 1 + s["query"]] for b, s in enumerate(spots)])
        read_query = torch.stack([mean[b, :, 1 + s["query"]] for b, s in enumerate(spots)])  # each token → query
        rows.append({"query": queries, "cls": mean[:, 0], "to query": read_query})
    return rows


def attention_table(models: dict, dataset, task, count: int = EXAMPLES) -> list[dict]:
    """Per variant and layer: mean attention (over the first `count` test images) of the query token on its key
    and on another key, of CLS on the asked value and on another value, and of the asked key's token and another
    key's token on the query, with the uniform level 1/T."""
    from analysis.inspection import test_images

    images, raw, _ = test_images(dataset, 0, count)
    spots = [places(dataset.test.images[i].cpu(), task.grid, task.layout) for i in range(len(raw))]
    table = []
    for variant, model in models.items():
        for layer, row in enumerate(attention_rows(model, images, spots), start=1):
            tokens = row["query"].shape[1]

            def at(who, where, row=row):
                """Mean weight of `who` on the cell(s) `where` names (several: their mean per image)."""
                per_image = []
                for b, s in enumerate(spots):
                    cells = s[where] if isinstance(s[where], list) else [s[where]]
                    if cells:
                        per_image.append(statistics.fmean(float(row[who][b, 1 + c]) for c in cells))
                return statistics.fmean(per_image) if per_image else float("nan")

            table.append(
                {
                    "variant": variant,
                    "layer": layer,
                    "query → its key": at("query", "key"),
                    "query → another key": at("query", "other_keys"),
                    "CLS → its value": at("cls", "value"),
                    "CLS → another value": at("cls", "other_values"),
                    "its key → query": at("to query", "key"),
                    "another key → query": at("to query", "other_keys"),
                    "uniform": 1 / tokens,
                }
            )
    return table


def maps_figure(models: dict, dataset, task, index: int = 0):
    """One test image: per variant (rows) and layer (columns), the query token's attention over the G×G cells
    (heads averaged), the query (Q), its key (K) and value (V) marked; the image itself first."""
    from analysis.inspection import test_images
    from analysis.plots import _mpl

    plt = _mpl()
    images, raw, labels = test_images(dataset, index, 1)
    spot = places(dataset.test.images[index].cpu(), task.grid, task.layout)
    layers = len(next(iter(models.values())).blocks)
    fig, axes = plt.subplots(len(models), layers + 1, figsize=(1.9 * (layers + 1), 2.0 * len(models)), squeeze=False)
    for row, (variant, model) in zip(axes, models.items(), strict=True):
        row[0].imshow(raw[0, 0].numpy(), cmap="gray")
        row[0].set_title(f"{variant}\nlabel {int(labels[0])}", fontsize=7)
        for layer, found in enumerate(attention_rows(model, images, [spot]), start=1):
            weights = found["query"][0, 1:].reshape(task.grid, task.grid)
            row[layer].imshow(weights.numpy(), cmap="viridis")
            marks = [("query", "Q", "white"), ("key", "K", "white"), ("value", "V", "red")]
            marks += [("other_keys", "k", "silver"), ("other_values", "v", "salmon")]
            for name, mark, colour in marks:
                for cell in spot[name] if isinstance(spot[name], list) else [spot[name]]:
                    y, x = divmod(cell, task.grid)
                    row[layer].text(x, y, mark, color=colour, ha="center", va="center", fontsize=8)
            row[layer].set_title(f"layer {layer}: query → cells", fontsize=7)
        for axis in row:
            axis.set_xticks([])
            axis.set_yticks([])
    fig.suptitle(
        f"{task.name}: the query token's attention over the cells (heads averaged, colours scaled per panel); "
        "Q query, K/V its key and value, k/v the other pairs",
        fontsize=8,
    )
    fig.tight_layout()
    return fig


def kept_models(params, dataset_name: str, seed: int) -> dict:
    """The variants' models of `seed` on `dataset_name` with their tested weights (here or kept), by variant;
    variants without a finished run or kept weights are left out."""
    from rpevit.core.errors import UserError
    from rpevit.lab.training.runs import inspected_model

    from .recall_pilot import compared, run_of

    models = {}
    for variant in compared(params):
        try:
            models[variant] = inspected_model(run_of(params, dataset_name, variant, seed))[0]
        except (UserError, FileNotFoundError):
            continue
    return models


def report_section(params, folder, seed: int | None = None) -> list[str]:
    """The report's section on where the query looks: per K whose variants all have tested weights of the
    first seed (here or kept), recall_maps_<dataset>.png; the table of every such K in
    recall_attention.{csv,md}; [] when no K has them yet."""
    from analysis.plots import save_png
    from rpevit.core.data import dataset_info
    from rpevit.lab.store import records
    from rpevit.lab.tables import markdown_table
    from rpevit.lab.training.runs import dataset_for

    from .recall_pilot import compared

    seed = params.seeds[0] if seed is None else seed
    rows, figures = [], []
    for name in params.datasets:
        models = kept_models(params, name, seed)
        if len(models) < len(compared(params)):
            continue
        dataset, task = dataset_for(params, name), dataset_info(name).recall
        rows += [{"K": task.pairs, **row} for row in attention_table(models, dataset, task)]
        figure = f"recall_maps_{name}.png"
        save_png(maps_figure(models, dataset, task), folder / figure)
        figures.append(f"![Where the query looks, K = {task.pairs}, seed {seed}]({figure})")
    if not rows:
        return []
    # 5 significant digits: the float32 sums behind each weight differ in their last bits between CPUs
    records.write_csv(folder / f"{MAPS_TABLE}.csv", [{k: _short(v) for k, v in row.items()} for row in rows])
    table = markdown_table(rows, digits=3)
    records.write_text(folder / f"{MAPS_TABLE}.md", table)
    return [
        "",
        f"## Where the query looks (seed {seed}, the first {EXAMPLES} test images)",
        "",
        __doc__.split("\n\n")[1].replace("\n", " ").strip(),
        "",
        reading(rows),
        "",
        table.rstrip("\n"),
        "",
        *figures,
    ]


def _short(value):
    """A float to 5 significant digits (other values as they are)."""
    return float(f"{value:.5g}") if isinstance(value, float) else value


def reading(rows: list[dict]) -> str:
    """One sentence per K from the table: per variant, the largest excess (over layers) of the weight on the
    asked pair over the weight on another pair, for the query's key and CLS's value."""
    parts = []
    for k in dict.fromkeys(r["K"] for r in rows):
        found = []
        for variant in dict.fromkeys(r["variant"] for r in rows if r["K"] == k):
            mine = [r for r in rows if r["K"] == k and r["variant"] == variant]
            key = max(r["query → its key"] - r["query → another key"] for r in mine)
            value = max(r["CLS → its value"] - r["CLS → another value"] for r in mine)
            found.append(f"{variant} {key:+.3f} (key) and {value:+.3f} (value)")
        parts.append(f"K = {k}: " + "; ".join(found))
    read = []
    for k in dict.fromkeys(r["K"] for r in rows):
        found = {
            v: max(r["another key → query"] for r in rows if r["K"] == k and r["variant"] == v)
            for v in dict.fromkeys(r["variant"] for r in rows if r["K"] == k)
        }
        read.append(f"K = {k}: " + ", ".join(f"{v} {w:.3f}" for v, w in found.items()))
    uniform = rows[0]["uniform"]
    return (
        "Largest excess over the layers of the weight on the asked pair over another pair's (0: the model does "
        "not tell them apart; the uniform weight is 1/T): " + ". ".join(parts) + ". Largest weight over the "
        f"layers that a pair not asked about puts from its key's token on the query (uniform {uniform:.3f}): "
        + "; ".join(read)
        + "."
    )
