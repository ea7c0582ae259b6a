#!/bin/bash
# Run a study on a Ray cluster inside one Slurm allocation (Ray's documented sbatch pattern:
# one `ray start` per node through srun — the first node is the head — then the driver).
#
#   sbatch --nodes=4 scripts/ray_slurm.sh                 # smoke preset
#   PRESET=fashion_mnist GPUS_PER_RUN=0.25 sbatch --nodes=2 --gpus-per-task=4 scripts/ray_slurm.sh
#
# Submit it from the project directory, which every node must see (a shared filesystem), with
# rpevit installed there: make install; .venv/bin/pip install -e '.[cluster]'.
# Records and checkpoints go to $RPEVIT_RUNS (default: runs/ in the project): it must be on the
# shared filesystem too. Resubmitting the same job finishes only what is missing.
#
#SBATCH --job-name=rpevit-study
#SBATCH --nodes=2
#SBATCH --exclusive
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=16
#SBATCH --time=04:00:00
#SBATCH --output=rpevit-study-%j.out
# GPU nodes: add e.g. `#SBATCH --gpus-per-task=4` (or pass --gpus-per-task to sbatch) and set GPUS_PER_RUN.
# shellcheck disable=SC2206
set -euo pipefail

PRESET=${PRESET:-smoke}
CPUS_PER_RUN=${CPUS_PER_RUN:-1}
GPUS_PER_RUN=${GPUS_PER_RUN:-0}
VENV=${VENV:-.venv}
PORT=${RAY_PORT:-6379}
export RPEVIT_RUNS=${RPEVIT_RUNS:-$PWD/runs}
RAY="$VENV/bin/ray"
CPUS=${SLURM_CPUS_PER_TASK:-1}
GPUS=${SLURM_GPUS_PER_TASK:-0}
GPUS=${GPUS##*:}  # "a100:4" → 4

# Ray's token authentication (Ray >= 2.52; on by default from 2.61): every node and the driver use
# one token, ~/.ray/auth_token (so the home directory must be shared too), or $RAY_AUTH_TOKEN if set
if "$RAY" get-auth-token --help >/dev/null 2>&1; then
    export RAY_AUTH_MODE=${RAY_AUTH_MODE:-token}
    if [[ "$RAY_AUTH_MODE" == token && -z "${RAY_AUTH_TOKEN:-}" ]]; then
        "$RAY" get-auth-token --generate >/dev/null  # made once, never printed
    fi
fi

# the head node's address (the first node of the allocation; IPv4 if it reports several addresses)
nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
head_node=${nodes[0]}
head_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
if [[ "$head_ip" == *" "* ]]; then
    read -ra addresses <<<"$head_ip"
    head_ip=${addresses[0]}
    [[ ${#head_ip} -gt 16 ]] && head_ip=${addresses[1]}
fi
address=$head_ip:$PORT
echo "Ray head: $head_node ($address); runs directory: $RPEVIT_RUNS"

srun --nodes=1 --ntasks=1 -w "$head_node" \
    "$RAY" start --head --node-ip-address="$head_ip" --port="$PORT" \
    --num-cpus "$CPUS" --num-gpus "$GPUS" --include-dashboard false --block &
sleep 10  # let the head come up before the workers join

for node in "${nodes[@]:1}"; do
    echo "Ray worker: $node"
    srun --nodes=1 --ntasks=1 -w "$node" \
        "$RAY" start --address "$address" --num-cpus "$CPUS" --num-gpus "$GPUS" --block &
    sleep 5
done

# the driver runs in the batch step (on the head node); it only submits tasks and writes the summary
"$VENV/bin/python" -u -m rpevit study "$PRESET" --engine ray --address "$address" \
    --cpus-per-run "$CPUS_PER_RUN" --gpus-per-run "$GPUS_PER_RUN" --no-progress
