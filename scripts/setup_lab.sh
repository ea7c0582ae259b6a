#!/usr/bin/env bash
# What every install route runs once after installing rpevit into an environment (`make install` for the
# .venv, environment.yml's post-create steps for conda), so both keep notebooks/ clean the same way:
# the "Python (rpevit)" Jupyter kernel the notebooks declare; the environment's Jupyter server config, whose
# save hook strips outputs from notebooks saved under notebooks/ (rpevit.lab.lab_hook, for a plain
# `jupyter lab` too); and, inside a git checkout, the clean filter .gitattributes names for notebooks/*.ipynb.
# Usage: bash scripts/setup_lab.sh PYTHON   (the environment's python)
set -euo pipefail
py=${1:?usage: bash scripts/setup_lab.sh PYTHON}
cd "$(dirname "$0")/.."
"$py" -m ipykernel install --sys-prefix --name rpevit --display-name "Python (rpevit)" >/dev/null
prefix=$("$py" -c "import sys; print(sys.prefix)")
mkdir -p "$prefix/etc/jupyter"
printf '{"FileContentsManager": {"pre_save_hook": "rpevit.lab.lab_hook.pre_save_hook"}}\n' \
  > "$prefix/etc/jupyter/jupyter_server_config.json"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  python_path=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")
  git config filter.nbclean.clean "$python_path scripts/nbclean.py"
fi
echo "setup_lab: kernel 'Python (rpevit)', the notebook save hook in $prefix/etc/jupyter and the git clean filter"
