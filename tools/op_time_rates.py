#!/usr/bin/env python3
"""What fraction of the dense peak each kernel family reached, from recorded `--op-times`.

Reads run reports of the Preflight runtime (`preflight run --op-times --report R.json`; the GPU
session records op times with every new run) and prints, per run with flash attention, the FLOP
rate of its flash-attention forward and backward kernels and of all its GEMM ops together, as a
fraction of the GPU's dense 16-bit peak (its spec under data/gpus). The step-time model charges
each family at one fitted fraction (the GPU spec's "runtime" block: attention_fraction_of_peak,
gemm_max_fraction_of_peak with gemm_half_efficiency_dim); this shows what the kernels did.

FLOPs counted as the step-time model counts them: a causal flash forward executes half of
4 * mbs * seq^2 * (heads * head_dim) / tp (Dao et al. 2022), its backward 2.5 times that (5
matmuls to the forward's 2, alg. 4); GEMM FLOPs are the report's own per-op counts. An fp8 plan's
GEMM fraction is against the 16-bit peak too (so above 1 where fp8 pays).

Usage: tools/op_time_rates.py REPORT_OR_DIR... [--data-dir DIR]
Exit codes: 0 printed (runs without op times are skipped and counted); 2 bad input.
"""
import argparse
import json
import pathlib
import sys


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"op_time_rates: cannot read {path}: {e}", file=sys.stderr)
        sys.exit(2)


def reports(paths):
    for p in map(pathlib.Path, paths):
        if p.is_dir():
            yield from sorted(q for q in p.rglob("*.json") if q.name != "gate.json")
        elif p.is_file():
            yield p
        else:
            print(f"op_time_rates: {p}: no such file or folder", file=sys.stderr)
            sys.exit(2)


def q_width(config):
    """heads x head_dim of a Hugging Face config.json (llama or gpt2 keys)."""
    heads = config.get("num_attention_heads", config.get("n_head"))
    hidden = config.get("hidden_size", config.get("n_embd"))
    if not heads or not hidden:
        return None
    return heads * config["head_dim"] if config.get("head_dim") else hidden


def rates(report, data_dir, peaks, widths):
    """(label, fwd, bwd, gemm) fractions of the 16-bit peak, or None when the run cannot say."""
    measured = report.get("measured")
    if not isinstance(measured, dict) or not measured.get("op_times"):
        return None
    plan, model, gpu = report.get("plan", {}), report.get("model", {}), report.get("gpu", {})
    name, gpu_name = model.get("name"), gpu.get("name")
    if plan.get("attention") != "flash" or not name or not gpu_name:
        return None
    if gpu_name not in peaks:
        spec = load_json(data_dir / "gpus" / f"{gpu_name}.json")
        peaks[gpu_name] = spec.get("peak_bf16_flops_per_s")
    if name not in widths:
        path = data_dir / "models" / f"{name}.json"
        widths[name] = q_width(load_json(path)) if path.is_file() else None
    peak, qw = peaks[gpu_name], widths[name]
    if not peak or not qw:
        return None
    kinds = {k["kind"]: k for k in measured["op_times"].get("by_kind", [])}
    fwd_flops = 0.5 * 4 * plan["mbs"] * plan["seq"] ** 2 * qw / plan.get("tp", 1)

    def fraction(kind, flops_per_call):
        k = kinds.get(kind)
        return flops_per_call * k["count"] / k["time_s"] / peak if k and k.get("time_s", 0) > 0 else None

    gemms = [k for k in kinds.values() if k.get("gemm_flops")]
    gemm_s = sum(k["time_s"] for k in gemms)
    gemm = sum(k["gemm_flops"] for k in gemms) / gemm_s / peak if gemm_s > 0 else None
    label = f"{name} seq {plan['seq']} mbs {plan['mbs']} tp {plan.get('tp', 1)} {plan.get('precision', '?')}"
    return label, fraction("flash_fwd", fwd_flops), fraction("flash_bwd", 2.5 * fwd_flops), gemm


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="run reports (.json) or folders of them")
    ap.add_argument("--data-dir", default=str(pathlib.Path(__file__).resolve().parent.parent / "data"),
                    help="catalog folder with gpus/ and models/ (default: the repository's data/)")
    a = ap.parse_args()
    data_dir = pathlib.Path(a.data_dir)
    peaks, widths, skipped = {}, {}, 0
    print("# fraction of the GPU's dense 16-bit peak, from each report's measured.op_times")
    print("| report | plan | flash fwd | flash bwd | GEMMs |")
    print("|---|---|---|---|---|")
    fmt = lambda v: "N/A" if v is None else f"{v:.2f}"
    for path in reports(a.paths):
        r = rates(load_json(path), data_dir, peaks, widths)
        if r is None:
            skipped += 1
            continue
        print(f"| {path} | {r[0]} | {fmt(r[1])} | {fmt(r[2])} | {fmt(r[3])} |")
    print(f"# {skipped} report(s) without op times, flash attention or a known model/GPU: skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
