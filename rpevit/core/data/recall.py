"""A 2D associative-recall task: exact retrieval, where linear attention is known to fail.

Associative recall (Ba et al. 2016 §4.1; Schlag et al. 2021 §6, "Linear Transformers are secretly fast
weight programmers"; Arora et al. 2023, "Zoology", multi-query associative recall) shows a model K
key–value pairs and then a key; the answer is that key's value. Softmax solves it at hundreds of keys
while linear attention's fixed-size state stalls. Here it is laid out on an image so a ViT sees it.

The image is a G×G grid of 4×4-pixel cells, one patch each at patch size 4 (G = 8: a 32×32 image, 64
tokens). A cell's top two rows hold a key glyph, its bottom two rows a value glyph; a glyph is one of
the 70 eight-pixel patterns with four pixels on, so no glyph covers another. A fixed codebook (drawn
once from CODEBOOK_SEED, part of the task's definition) gives 10 value glyphs (the classes), 40 key
glyphs and 20 distractor glyphs. An example places K pairs with K distinct keys and values drawn
uniformly (repeats allowed), one query cell — a copy of one pair's key over an all-on bottom half, the
mark that finds it — and D distractor cells (a distractor glyph over an empty bottom half). The label is
the class of the queried key's value (chance 10 %). Two layouts, a controlled contrast:

- `neighbour`: a key cell's value sits in the cell to its right (key over an empty bottom half, the
  value under an empty top half): answering needs a positional hop (value → the key to its left) and a
  content hop (query → the matching key), and a relative encoding can make the first one exact;
- `samecell`: key and value share one cell (top and bottom halves): only the content hop remains.

Dataset names: `recall<G>_<layout>_k<K>` or `recall<G>_<layout>_k<K>_d<D>`, e.g. `recall8_neighbour_k8`.
Training examples are drawn anew in every batch from the run's data generator (a function of the seed
and the epoch, as the canvas tasks' places are); validation and test sets are drawn once from the split
seed, the same for every run.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

import torch

CELL = 4  # pixels per cell side: one patch at patch size 4
HALF = CELL * CELL // 2  # pixels in a half cell (a glyph)
CODEBOOK_SEED = 2021  # the codebook's draw: part of the task, the same for every run and split seed
VALUE_GLYPHS, KEY_GLYPHS, DISTRACTOR_GLYPHS = 10, 40, 20  # 70 four-of-eight patterns in all
LAYOUTS = ("neighbour", "samecell")
NAME = re.compile(r"^recall(\d+)_(neighbour|samecell)_k(\d+)(?:_d(\d+))?$")
NAME_PATTERN = "recall<G>_<neighbour|samecell>_k<K>[_d<D>]"
DEFAULT_SIZES = {"train": 20_000, "val": 2_000, "test": 5_000}  # training examples are per epoch, drawn anew
FIXED_SPLIT_OFFSET = {"train": 8_000, "val": 8_001, "test": 8_002}  # split seed + this draws each fixed set


@dataclass(frozen=True)
class RecallTask:
    """One recall task: grid side G (cells), layout, K pairs and D distractor cells."""

    grid: int
    layout: str
    pairs: int
    distractors: int = 0

    @property
    def name(self) -> str:
        """The dataset name, e.g. `recall8_neighbour_k8`."""
        suffix = f"_d{self.distractors}" if self.distractors else ""
        return f"recall{self.grid}_{self.layout}_k{self.pairs}{suffix}"

    @property
    def image_size(self) -> int:
        """Pixels per image side."""
        return self.grid * CELL

    def problem(self) -> str | None:
        """Why these settings cannot be drawn (None if they can)."""
        if self.grid < 2:
            return f"the grid needs at least 2 cells a side, got {self.grid}"
        if not 1 <= self.pairs <= KEY_GLYPHS:
            return f"K must be 1..{KEY_GLYPHS} (distinct keys from the codebook), got {self.pairs}"
        if self.distractors > DISTRACTOR_GLYPHS * self.grid**2:
            return f"too many distractors: {self.distractors}"
        cells = (2 if self.layout == "neighbour" else 1) * self.pairs + 1 + self.distractors
        if cells > self.grid**2:
            return f"{cells} cells are needed and the {self.grid}×{self.grid} grid has {self.grid**2}"
        if self.layout == "neighbour" and self.pairs > always_placeable(self.grid):
            return (
                f"the neighbour layout places at most {always_placeable(self.grid)} pairs on a "
                f"{self.grid}×{self.grid} grid for sure (random placement can block a row), got {self.pairs}"
            )
        return None


def always_placeable(grid: int) -> int:
    """Side-by-side pairs that random one-at-a-time placement can always put on a grid×grid board: a row
    of G cells is blocked by as few as ⌈(G − 1)/3⌉ pairs, so that many per row are always possible."""
    return grid * math.ceil((grid - 1) / 3)


def parse(name: str) -> RecallTask | None:
    """The task a dataset name describes (None if the name is not a recall name)."""
    found = NAME.match(name)
    if not found:
        return None
    grid, layout, pairs, distractors = found.groups()
    return RecallTask(int(grid), layout, int(pairs), int(distractors or 0))


def codebook() -> dict[str, torch.Tensor]:
    """The fixed glyphs as uint8 (count, 8) patterns of 0 / 255: values (the classes), keys, distractors."""
    patterns = torch.zeros(math.comb(HALF, HALF // 2), HALF, dtype=torch.uint8)
    for row, on in enumerate(itertools.combinations(range(HALF), HALF // 2)):
        patterns[row, list(on)] = 255
    order = torch.randperm(len(patterns), generator=torch.Generator().manual_seed(CODEBOOK_SEED))
    shuffled = patterns[order]
    cut = (VALUE_GLYPHS, VALUE_GLYPHS + KEY_GLYPHS)
    return {"values": shuffled[: cut[0]], "keys": shuffled[cut[0] : cut[1]], "distractors": shuffled[cut[1] :]}


QUERY_MARK = torch.full((HALF,), 255, dtype=torch.uint8)  # the query cell's bottom half: all on


def _choose(mask: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One allowed index per row of a boolean (N, cells) mask, uniform among the allowed."""
    return torch.multinomial(mask.float(), 1, generator=generator).squeeze(1)


def draw(task: RecallTask, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` examples of `task`: uint8 images (count, 1, 4G, 4G) and int64 labels (count,) on the
    generator's device, every random choice drawn from `generator`, so they are a function of its state."""
    device = generator.device
    cells, rows = task.grid**2, torch.arange(count, device=device)
    glyphs = {part: patterns.to(device) for part, patterns in codebook().items()}
    free = torch.ones(count, cells, dtype=torch.bool, device=device)
    keys = torch.argsort(torch.rand(count, KEY_GLYPHS, generator=generator, device=device), dim=1)[:, : task.pairs]
    values = torch.randint(0, VALUE_GLYPHS, (count, task.pairs), generator=generator, device=device)
    top = torch.zeros(count, cells, HALF, dtype=torch.uint8, device=device)
    bottom = torch.zeros(count, cells, HALF, dtype=torch.uint8, device=device)
    for pair in range(task.pairs):
        if task.layout == "neighbour":  # a free cell whose right neighbour is free too
            anchors = free.view(count, task.grid, task.grid).clone()
            anchors[:, :, :-1] &= anchors[:, :, 1:].clone()
            anchors[:, :, -1] = False
            key_cell = _choose(anchors.view(count, cells), generator)
            value_cell = key_cell + 1
        else:
            key_cell = value_cell = _choose(free, generator)
        free[rows, key_cell] = free[rows, value_cell] = False
        top[rows, key_cell] = glyphs["keys"][keys[:, pair]]
        bottom[rows, value_cell] = glyphs["values"][values[:, pair]]
    asked = torch.randint(0, task.pairs, (count,), generator=generator, device=device)
    query_cell = _choose(free, generator)
    free[rows, query_cell] = False
    top[rows, query_cell] = glyphs["keys"][keys[rows, asked]]
    bottom[rows, query_cell] = QUERY_MARK.to(device)
    for _ in range(task.distractors):
        cell = _choose(free, generator)
        free[rows, cell] = False
        top[rows, cell] = glyphs["distractors"][
            torch.randint(0, DISTRACTOR_GLYPHS, (count,), generator=generator, device=device)
        ]
    return render(task.grid, top, bottom), values[rows, asked]


def render(grid: int, top: torch.Tensor, bottom: torch.Tensor) -> torch.Tensor:
    """Images (N, 1, 4G, 4G) from each cell's halves, (N, G², 8) each, cells in row-major order (a cell's
    top half is its first two pixel rows, each half row-major)."""
    count = top.shape[0]
    cells = torch.cat([top, bottom], dim=2).view(count, grid, grid, CELL, CELL)  # (N, row, column, y, x)
    return cells.permute(0, 1, 3, 2, 4).reshape(count, 1, grid * CELL, grid * CELL)


def cells_of(images: torch.Tensor, grid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of `render`: each cell's (top, bottom) halves, (N, G², 8) each."""
    count = images.shape[0]
    cells = images.view(count, grid, CELL, grid, CELL).permute(0, 1, 3, 2, 4).reshape(count, grid * grid, 2, HALF)
    return cells[:, :, 0], cells[:, :, 1]


def fixed_split(task: RecallTask, split: str, count: int, split_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed set of `count` examples for `split`, drawn from the split seed (the same for every run)."""
    return draw(task, count, torch.Generator().manual_seed(split_seed + FIXED_SPLIT_OFFSET[split]))
