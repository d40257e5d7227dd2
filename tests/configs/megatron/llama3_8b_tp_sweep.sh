#!/bin/bash
# Test fixture: a sweep over tensor-parallel sizes, one launch per pass (written for preflight).
# bash runs the loop's first pass with TP=2; the passes with TP=4 and TP=8 launch later jobs.

GPUS=8
SHAPE="--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \
  --group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm \
  --position-embedding-type rope --rotary-base 500000 --untie-embeddings-and-output-weights \
  --disable-bias-linear --max-position-embeddings 8192 --seq-length 8192 \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B"

for TP in 2 4 8; do
    torchrun --nproc_per_node $GPUS pretrain_gpt.py $SHAPE \
        --tensor-model-parallel-size $TP --sequence-parallel --use-distributed-optimizer \
        --micro-batch-size 1 --global-batch-size 64 --bf16 \
        --attention-dropout 0.0 --hidden-dropout 0.0 \
        --save /ckpt/tp$TP --load /ckpt/tp$TP
done
