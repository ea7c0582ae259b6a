#!/usr/bin/env bash
# What travels to a lent GPU machine: the device tool sends every tracked file (and untracked ones git
# does not ignore) plus the paths named in `carry`, 64 MiB at most. reports/ alone is ~80 MB, so before
# a sitting `slim PRESET…` takes reports/ out of git's index, keeping each named reports/PRESET/records
# (which the study reads to know what is finished: name the pilots a sitting may chain to; each one's
# `reference:` and the pilot before it in its order are added), and ignores it locally; `restore` puts the index back exactly as it was (a copy is kept in
# .git). Nothing on disk is touched. Never commit between the two.
#   bash campaign/scripts/device_tree.sh slim canvas56_dial16 canvas56_dial8   # then the device call (docs/scaling.md)
#   bash campaign/scripts/device_tree.sh restore
#   bash campaign/scripts/device_tree.sh size [carry paths…]      # MiB that would travel
set -euo pipefail
orders="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/orders.py"  # the pilot orders, beside this script
cd "$(git rev-parse --show-toplevel)"
saved=.git/rpevit-full-index
marker="# rpevit device_tree slim"
size() {
  python3 - "$@" <<'PY'
import subprocess, sys
from pathlib import Path
listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True).stdout
files = {Path(n) for n in listed.decode().split("\0") if n}
for extra in sys.argv[1:]:
    root = Path(extra)
    files |= {p for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file()}
total = sum(p.stat().st_size for p in files if p.is_file())
print(f"{total / 2**20:.1f} MiB would travel (the device tool's limit: 64 MiB)")
PY
}
case "${1:-}" in
  slim)
    shift
    [ $# -gt 0 ] || { echo "usage: slim PRESET [PRESET…]" >&2; exit 2; }
    [ -e "$saved" ] && { echo "error: already slim ($saved exists); run restore first" >&2; exit 2; }
    cp .git/index "$saved"
    git rm -r -q --cached reports
    printf '%s\n/reports/*\n' "$marker" >> .git/info/exclude
    # a dial's `reference:` (params/PRESET.yaml) is read for its go/no-go, and the pilot before it in its
    # order for the start gate (a later pilot starts only after that one's NO-GO), so their records travel too
    references=$(for preset in "$@"; do sed -n 's/^reference: *\([A-Za-z0-9_.-]*\).*/\1/p' "params/$preset.yaml" 2>/dev/null || true; done)
    previous=$(python3 "$orders" "$@")
    presets=$(printf '%s\n' "$@" $references $previous | awk 'NF && !seen[$0]++')
    echo "keeping the kept records of:" $presets
    for preset in $presets; do
      [ -d "reports/$preset/records" ] && git add -f "reports/$preset/records"
      printf '!/reports/%s/\n/reports/%s/*\n!/reports/%s/records/\n' "$preset" "$preset" "$preset" >> .git/info/exclude
    done
    size ;;
  restore)
    [ -e "$saved" ] || { echo "nothing to restore ($saved is missing)"; exit 0; }
    mv "$saved" .git/index
    python3 - <<'PY'
from pathlib import Path
exclude = Path(".git/info/exclude")
lines = exclude.read_text().splitlines(keepends=True)
if "# rpevit device_tree slim\n" in lines:
    exclude.write_text("".join(lines[: lines.index("# rpevit device_tree slim\n")]))
PY
    git status --short | head -5 ;;
  size) shift; size "$@" ;;
  *) echo "usage: $0 slim PRESET… | restore | size [paths]" >&2; exit 2 ;;
esac
