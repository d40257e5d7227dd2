#!/bin/bash
# Test fixture in the shape of Megatron-LM examples/mixtral/train_mixtral_8x7b_distributed.sh
# (written for preflight, not a copy): the tokenizer is a sentencepiece file given as the
# script's second argument, so the script itself does not say how large the vocabulary is.

GPUS_PER_NODE=8
NNODES=${SLURM_NNODES:-"1"}
CHECKPOINT_PATH=$1
TOKENIZER_MODEL=$2
DATA_PATH=$3

LAUNCH=(--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES)

SHAPE=(
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --swiglu
    --normalization RMSNorm
    --position-embedding-type rope
    --rotary-base 1000000
    --max-position-embeddings 32768
    --seq-length 4096
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --attention-dropout 0.0
    --hidden-dropout 0.0
)

EXPERTS=(
    --num-experts 8
    --moe-router-topk 2
    --moe-grouped-gemm
    --moe-token-dispatcher-type alltoall
)

TOKENS=(
    --tokenizer-type Llama2Tokenizer
    --tokenizer-model ${TOKENIZER_MODEL}
    --data-path $DATA_PATH
)

PARALLEL=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 4
    --expert-model-parallel-size 8
    --use-distributed-optimizer
    --sequence-parallel
)

torchrun ${LAUNCH[@]} pretrain_gpt.py \
    ${SHAPE[@]} ${EXPERTS[@]} ${TOKENS[@]} ${PARALLEL[@]} \
    --micro-batch-size 1 --global-batch-size 256 --bf16 \
    --save $CHECKPOINT_PATH --load $CHECKPOINT_PATH
