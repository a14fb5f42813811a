#!/bin/bash
# ptyacc on several nodes with SLURM: one `accelerate launch` per node, started by srun; each
# launch starts one process per GPU of its node. Submit with: sbatch configs/slurm_multinode.sh CONFIG.yaml
#SBATCH --job-name=ptyacc
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1          # one launcher per node; it starts the per-GPU processes
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=32
#SBATCH --time=02:00:00

set -euo pipefail
CONFIG=${1:?usage: sbatch slurm_multinode.sh CONFIG.yaml}
GPUS_PER_NODE=${SLURM_GPUS_ON_NODE:-4}
HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
PORT=${PORT:-29500}
export OMP_NUM_THREADS=$((SLURM_CPUS_PER_TASK / GPUS_PER_NODE))
# export NCCL_DEBUG=INFO            # uncomment to see how NCCL connects the nodes

srun bash -c "accelerate launch \
    --multi_gpu \
    --num_machines $SLURM_NNODES \
    --num_processes $((SLURM_NNODES * GPUS_PER_NODE)) \
    --machine_rank \$SLURM_NODEID \
    --main_process_ip $HEAD_NODE \
    --main_process_port $PORT \
    --mixed_precision no \
    --rdzv_backend static \
    -m ptyacc.run $CONFIG"
