"""The `list` command: every backend, positional method, variant (filtered by backend or position),
dataset and preset, as the package's registries name them."""

from __future__ import annotations

from .core.errors import UserError


def list_command(args) -> int:
    """Print backends, positional methods, variants, datasets and presets (or one of them, filtered)."""
    from .core.attention import BACKENDS
    from .core.data import DATASETS
    from .core.position import MECHANISMS, POSITIONS
    from .core.variants import list_variants, parse_variant
    from .lab.params import list_presets

    for flag, value, allowed in (
        ("--backend", args.backend, BACKENDS),
        ("--position", args.position, POSITIONS),
        ("--mechanism", args.mechanism, MECHANISMS),
    ):
        if value is not None and value not in allowed:
            raise UserError(f"{flag}: unknown {value!r}; choose from {', '.join(allowed)}.")

    def show(part: str) -> bool:
        return args.what in ("all", part)

    if show("backends"):
        print("backends:")
        for name, cls in BACKENDS.items():
            if args.backend in (None, name):
                print(f"  {name}: {'exact' if cls.exact else 'linear'} — {cls.summary}")
    if show("positions"):
        print("positional methods (name: mechanism, relative/absolute — description):")
        for mechanism in MECHANISMS:
            for name, method in POSITIONS.items():
                if (
                    method.mechanism == mechanism
                    and args.mechanism in (None, mechanism)
                    and args.position in (None, name)
                ):
                    kind = "relative" if method.relative else "absolute"
                    print(f"  {name}: {mechanism}, {kind} — {method.summary}")
    if show("datasets"):
        from .core.data.recall import NAME_PATTERN

        print("datasets:  " + ", ".join(DATASETS))
        print(f"           and the 2D associative-recall tasks {NAME_PATTERN}, e.g. recall8_neighbour_k8")
    if show("presets"):
        print("presets:   " + ", ".join(list_presets()))
    if show("variants"):
        variants = [v for v in list_variants() if _variant_matches(parse_variant(v), args)]
        print(f"variants ({len(variants)}):")
        for name in variants:
            print("  " + name)
    return 0


def _variant_matches(variant, args) -> bool:
    from .core.position import POSITIONS

    return (
        args.backend in (None, variant.backend)
        and args.position in (None, *variant.positions)
        and (args.mechanism is None or any(POSITIONS[p].mechanism == args.mechanism for p in variant.positions))
    )
