#!/bin/bash
# A launch script that finds the files beside it as Megatron-LM's examples do (written for the
# --from tests): its folder from ${BASH_SOURCE[0]}, whatever folder it is run from, then the
# model's arguments from there. Llama-3-8B on 8 GPUs, tp 2 with sequence parallelism.
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" >/dev/null 2>&1 && pwd)
source "${SCRIPT_DIR}/llama3_8b_model_args.sh"
cd "${SCRIPT_DIR}/.."

torchrun --nproc_per_node 8 pretrain_gpt.py \
    "${MODEL_ARGS[@]}" \
    --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer \
    --micro-batch-size 1 --global-batch-size 128 --bf16 --grad-reduce-in-bf16 \
    --save "$(pwd)/checkpoints"
