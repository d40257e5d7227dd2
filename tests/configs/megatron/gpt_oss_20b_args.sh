#!/bin/bash
# Test fixture: a Megatron-LM launch of gpt-oss-20b in Megatron-LM's own gpt-oss terms (the flags
# arguments.py defines for it: --quick-geglu with --glu-linear-offset and --activation-func-clamp-value,
# --softmax-type learnable, --window-size with --window-attn-skip-freq), written for preflight, not a copy.
MODEL_ARGS=(
    --num-layers 24
    --hidden-size 2880
    --ffn-hidden-size 2880
    --num-attention-heads 64
    --kv-channels 64
    --group-query-attention
    --num-query-groups 8
    --normalization RMSNorm
    --position-embedding-type yarn
    --rotary-scaling-factor 32.0
    --yarn-original-max-position-embeddings 4096
    --yarn-beta-fast 32.0
    --yarn-beta-slow 1.0
    --no-yarn-correction-range-round-to-int
    --rotary-base 150000
    --max-position-embeddings 131072
    --untie-embeddings-and-output-weights
    --quick-geglu
    --glu-linear-offset 1.0
    --activation-func-clamp-value 7.0
    --softmax-type learnable
    --window-size 127,0
    --window-attn-skip-freq 2
    --num-experts 32
    --moe-router-topk 4
    --moe-grouped-gemm
    --moe-token-dispatcher-type alltoall
    --vocab-size 201088
    --make-vocab-size-divisible-by 128
)
TRAIN_ARGS=(
    --seq-length 4096
    --micro-batch-size 1
    --global-batch-size 128
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 1
    --expert-model-parallel-size 8
    --use-distributed-optimizer
    --bf16
    --grad-reduce-in-bf16
)
torchrun --nproc-per-node 8 pretrain_gpt.py "${MODEL_ARGS[@]}" "${TRAIN_ARGS[@]}"
