#!/usr/bin/env python3
"""Turns the markdown tables of llm-foundry's scripts/train/benchmarking/README.md into
llm-foundry-runs.csv, one row per table row, mechanically (no value is edited or added).

usage: extract.py README.md > llm-foundry-runs.csv
The README is read from llm-foundry at the commit named in dataset.json.
"""
import sys

GPU = {"h100_80gb": "h100-sxm-80gb", "a100_80gb": "a100-sxm-80gb", "a100_40gb": "a100-sxm-40gb"}
# llm-foundry precision names -> planner --precision; Composer "PURE" bf16 keeps fp32
# optimizer state like amp_bf16 (FSDP's flat parameters stay fp32), so both map to bf16-mixed.
PRECISION = {"amp_bf16": "bf16-mixed", "bf16": "bf16-mixed", "amp_fp8": "fp8-mixed"}
ZERO = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2}

OUT = ["source_ref", "model", "model_config", "gpu", "nodes", "gpus", "dp", "tp", "pp", "cp", "vpp",
       "micro_batch_size", "grad_accum", "seq_len", "global_batch_tokens", "zero_stage", "sequence_parallel",
       "recompute", "recompute_source", "precision", "precision_source", "compile", "tokens_per_s_per_gpu",
       "mfu_pct", "hfu_pct", "peak_mem_gib", "peak_mem_kind", "num_params", "outcome"]


def main(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    print(",".join(OUT))
    header = None
    for n, line in enumerate(lines, start=1):
        if not line.startswith("|"):
            header = None if not line.strip() or line.startswith("#") else header
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "Model":
            header = cells
            continue
        if header is None or cells[0].startswith("---"):
            continue
        r = dict(zip(header, cells))
        gpus = int(r["# GPUs"])
        row = {
            "source_ref": f"README.md:{n}",
            "model": r["Model"],
            "model_config": "mpt-" + r["Model"],
            "gpu": GPU[r["GPU"]],
            "nodes": "",  # not stated by the source
            "gpus": gpus, "dp": gpus, "tp": 1, "pp": 1, "cp": 1, "vpp": 1,
            "micro_batch_size": r["MicroBatchSize"],
            "grad_accum": r["GradAccum"],
            "seq_len": r["SeqLen (T)"],
            "global_batch_tokens": r["GlobalBatchSize (T)"],
            "zero_stage": ZERO[r["Sharding Strategy"]],
            "sequence_parallel": 0,
            "recompute": "full" if r["Activation Checkpointing"] == "True" else "none",
            "recompute_source": "activation_checkpointing=" + r["Activation Checkpointing"],
            "precision": PRECISION[r["Precision"]],
            "precision_source": r["Precision"] + "/" + r["MP Mode"],
            "compile": 0,
            "tokens_per_s_per_gpu": r["Throughput (T/s/GPU)"],
            "mfu_pct": r["MFU"], "hfu_pct": r["HFU"],
            "peak_mem_gib": "", "peak_mem_kind": "",
            "num_params": r["NumParams"],
            "outcome": "ok",
        }
        assert r["Activation CPUOffload"] == "False", n
        print(",".join(str(row[c]) for c in OUT))


if __name__ == "__main__":
    main(sys.argv[1])
