"""The pre-registered orders of pilots, fixed in the first pilot's header (params/canvas_gap_pilot.yaml,
params/recall_pilot.yaml): each later pilot trains only once the one before it ended NO-GO. Plain data
with no imports, so a shell script on a machine without torch can ask it (device_tree.sh)."""

GAP_ORDER = ("canvas_gap_pilot", "canvas56_gap_pilot", "canvas56_dial16", "canvas56_dial8")
RECALL_ORDER = ("recall_pilot", "recall_pilot_samecell", "recall_pilot_favor8")


def previous_pilot(name: str) -> str | None:
    """The pilot before `name` in its order (None for a first pilot or a preset outside the orders)."""
    for order in (GAP_ORDER, RECALL_ORDER):
        if name in order[1:]:
            return order[order.index(name) - 1]
    return None


def next_in_order(name: str) -> str | None:
    """The pilot after `name` in its order (None at an order's end or outside the orders)."""
    for order in (GAP_ORDER, RECALL_ORDER):
        if name in order[:-1]:
            return order[order.index(name) + 1]
    return None


if __name__ == "__main__":  # python3 campaign/orders.py PRESET…: the pilot before each, where there is one
    import sys

    print(" ".join(filter(None, map(previous_pilot, sys.argv[1:]))))
