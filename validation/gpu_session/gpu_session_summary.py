#!/usr/bin/env python3
"""Summarises the measured set recorded by validation/gpu_session/gpu_session.sh.

  gpu_session_summary.py MEASUREMENTS_DIR CONFIGS_JSON   table + CSV (MEASUREMENTS_DIR/summary.csv)
  gpu_session_summary.py --one REPORT.json               one line for one report (ours or PyTorch's)

Per recorded plan: predicted vs measured peak (the report's peak_bytes: tracked allocations +
the measured context/library overhead, against the planner's runtime-profile peak incl. its
modelled overhead), the device-level peak (total - lowest free memory seen), the tracked-peak
agreement, predicted vs measured median step time, tokens/s and MFU, and PyTorch's tokens/s,
MFU and peak for the same model and plan when its report is there.
Errors are (measured - predicted) / predicted.
"""
import csv
import json
import os
import sys

GIB = 1024.0 ** 3


def find(obj, names, prefer=("measured", "pytorch", "result", "results")):
    """First value under any of `names`, looking in preferred sub-objects first, then anywhere."""
    if not isinstance(obj, dict):
        return None
    for p in prefer:
        if isinstance(obj.get(p), dict):
            v = find(obj[p], names, ())
            if v is not None:
                return v
    for n in names:
        if obj.get(n) is not None and not isinstance(obj[n], (dict, list)):
            return obj[n]
    for k, v in obj.items():
        if isinstance(v, dict) and k not in ("predicted", "plan", "model", "gpu", "timeline"):
            r = find(v, names, ())
            if r is not None:
                return r
    return None


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def rel(m, p):
    if m is None or p in (None, 0):
        return None
    return (m - p) / p


def pct(x, digits=1):
    return "n/a" if x is None else f"{100 * x:+.{digits}f}%"


def gib(x):
    return "n/a" if x is None else f"{x / GIB:.2f}"


def num(x, fmt="{:.4f}"):
    return "n/a" if x is None else fmt.format(x)


def less(x, y):
    return None if x is None else x - y


def ours_row(r):
    m, p = r.get("measured", {}), r.get("predicted", {})
    # NCCL's own world-size-1 memory (an emulated rank's, an NCCL run's of one rank) is measured,
    # not predicted: set apart, as `validate --check` does.
    nccl = (r.get("parallel") or {}).get("nccl_world1_bytes") or 0
    # An emulated rank's step is its own stage's work alone (predicted.emulated_step_time_s), as
    # `validate --check` compares it; reports written before that field keep the job's step.
    alone = (r.get("parallel") or {}).get("backend") == "emulated" and p.get("emulated_step_time_s") is not None
    return {
        "status": r.get("status") if r.get("mode") == "device" else f"{r.get('status')} ({r.get('mode')})",
        "pred_peak": p.get("peak_bytes"),
        "meas_peak": less(m.get("peak_bytes"), nccl) if m.get("overhead_bytes") is not None else None,
        "device_peak": less(m.get("device_used_peak_bytes"), nccl),
        "nccl": nccl,
        "tracked_err": (r.get("agreement") or {}).get("tracked_peak_relative_error"),
        "pred_step": p.get("emulated_step_time_s") if alone else p.get("step_time_s"),
        "alone": alone,
        "meas_step": m.get("step_time_s"),
        "tok_s": m.get("tokens_per_s"),
        "mfu": m.get("mfu"),
        "pred_mfu": p.get("mfu"),
        "loss_first": (m.get("loss") or [None])[0],
        "loss_last": (m.get("loss") or [None])[-1],
        "attention": m.get("attention_backend"),
    }


def pytorch_row(r):
    return {
        "pt_tok_s": find(r, ("tokens_per_s", "tokens_per_second", "throughput_tokens_per_s")),
        "pt_mfu": find(r, ("mfu",)),
        "pt_peak": find(r, ("peak_bytes", "max_memory_allocated_bytes", "max_memory_allocated", "peak_allocated_bytes")),
        "pt_reserved": find(r, ("max_memory_reserved_bytes", "max_memory_reserved", "peak_reserved_bytes")),
        "pt_step": find(r, ("step_time_s",)),
        "pt_status": find(r, ("status",)) or "ok",
    }


def op_times_text(r):
    """`--op-times`: the three longest op kinds of the timed step and their shares."""
    ops = (r.get("measured") or {}).get("op_times")
    if not isinstance(ops, dict) or not ops.get("by_kind"):
        return ""
    top = ", ".join(f"{k['kind']} {100 * k['share']:.0f} %" for k in ops["by_kind"][:3])
    return f"; timed step {1e3 * ops['total_s']:.1f} ms: {top}"


def one(path):
    r = load(path)
    if r is None:
        return "no report"
    if (r.get("measured") or {}).get("source") != "pytorch":
        o = ours_row(r)
        apart = f" less NCCL's {gib(o['nccl'])} GiB" if o["nccl"] else ""
        return (f"{o['status']}; peak{apart} {gib(o['meas_peak'])} GiB vs predicted {gib(o['pred_peak'])} GiB "
                f"({pct(rel(o['meas_peak'], o['pred_peak']), 2)}); step {num(o['meas_step'])} s vs predicted "
                f"{'(this stage alone) ' if o['alone'] else ''}"
                f"{num(o['pred_step'])} s ({pct(rel(o['meas_step'], o['pred_step']))}); "
                f"{num(o['tok_s'], '{:,.0f}')} tokens/s; MFU {pct(o['mfu']).lstrip('+')}; driver peak "
                f"{gib(o['device_peak'])} GiB ({pct(rel(o['device_peak'], o['pred_peak']), 2)}); attention {o['attention']}"
                f"{op_times_text(r)}")
    t = pytorch_row(r)
    return (f"{t['pt_status']}; {num(t['pt_tok_s'], '{:,.0f}')} tokens/s; MFU {pct(t['pt_mfu']).lstrip('+')}; "
            f"peak allocated {gib(t['pt_peak'])} GiB")


def table(mdir, configs_path):
    configs = load(configs_path)["configs"]
    rows = []
    for c in configs:
        row = {"id": c["id"], "headline": bool(c.get("headline"))}
        r = load(os.path.join(mdir, c["id"] + ".json"))
        if r is None:
            row["status"] = "not recorded"
        else:
            row.update(ours_row(r))
        t = load(os.path.join(mdir, c["id"] + ".pytorch.json"))
        if t is not None:
            row.update(pytorch_row(t))
        tc = load(os.path.join(mdir, c["id"] + ".pytorch-compile.json"))
        if tc is not None:
            row["ptc_mfu"] = pytorch_row(tc)["pt_mfu"]
        row["peak_err"] = rel(row.get("meas_peak"), row.get("pred_peak"))
        row["device_peak_err"] = rel(row.get("device_peak"), row.get("pred_peak"))
        row["step_err"] = rel(row.get("meas_step"), row.get("pred_step"))
        rows.append(row)

    hdr = ["id", "status", "pred peak GiB", "meas peak GiB", "peak err", "device peak err", "tracked err",
           "pred step s", "meas step s", "step err", "tokens/s", "MFU", "pred MFU", "PyTorch tokens/s",
           "PyTorch MFU", "PyTorch peak GiB"]
    lines = []
    for r in rows:
        lines.append([r["id"], r.get("status", ""), gib(r.get("pred_peak")), gib(r.get("meas_peak")),
                      pct(r["peak_err"], 2), pct(r["device_peak_err"], 2), pct(r.get("tracked_err"), 3),
                      num(r.get("pred_step")), num(r.get("meas_step")), pct(r["step_err"]),
                      num(r.get("tok_s"), "{:,.0f}"), pct(r.get("mfu")).lstrip("+"), pct(r.get("pred_mfu")).lstrip("+"),
                      num(r.get("pt_tok_s"), "{:,.0f}"), pct(r.get("pt_mfu")).lstrip("+"), gib(r.get("pt_peak"))])
    widths = [max(len(str(x)) for x in col) for col in zip(hdr, *lines)]
    out = ["  ".join(str(x).ljust(w) for x, w in zip(hdr, widths))]
    out += ["  ".join(str(x).ljust(w) for x, w in zip(l, widths)) for l in lines]
    recorded = [r for r in rows if r.get("status") not in (None, "not recorded")]
    out.append(f"\n{len(recorded)} of {len(rows)} plans recorded in {mdir}; errors are (measured - predicted) / predicted")
    errs = [abs(r["peak_err"]) for r in recorded if r["peak_err"] is not None]
    serrs = [abs(r["step_err"]) for r in recorded if r["step_err"] is not None]
    if errs:
        out.append(f"peak error: max |err| {100 * max(errs):.2f}%, mean |err| {100 * sum(errs) / len(errs):.2f}%")
    derrs = [abs(r["device_peak_err"]) for r in recorded if r["device_peak_err"] is not None]
    if derrs:
        d = sorted(derrs)
        out.append(f"driver-measured peak error (the gate): P50 {100 * d[len(d) // 2]:.2f}%, "
                   f"P95 {100 * d[min(len(d) - 1, int(0.95 * len(d)))]:.2f}%, max {100 * d[-1]:.2f}% over {len(d)} runs")
    if serrs:
        out.append(f"step-time error: max |err| {100 * max(serrs):.1f}%, mean |err| {100 * sum(serrs) / len(serrs):.1f}%")
    for r in rows:
        if r["headline"]:
            ok = r.get("mfu") is not None and r["mfu"] >= 0.45
            beats = r.get("mfu") is not None and r.get("pt_mfu") is not None and r["mfu"] >= r["pt_mfu"]
            out.append(f"headline {r['id']}: MFU {pct(r.get('mfu')).lstrip('+')} (goal >= 45%: {'met' if ok else 'NOT met'}); "
                       f"PyTorch eager {pct(r.get('pt_mfu')).lstrip('+')} "
                       f"({'at least PyTorch' if beats else 'below PyTorch or PyTorch missing'}); "
                       f"PyTorch torch.compile {pct(r.get('ptc_mfu')).lstrip('+')}; attention {r.get('attention')}")
    with open(os.path.join(mdir, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        keys = ["id", "status", "pred_peak", "meas_peak", "peak_err", "device_peak", "device_peak_err", "tracked_err",
                "pred_step", "meas_step", "step_err", "tok_s", "mfu", "pred_mfu", "pt_tok_s", "pt_mfu", "pt_peak",
                "pt_reserved", "loss_first", "loss_last"]
        w.writerow(keys)
        for r in rows:
            w.writerow(["" if r.get(k) is None else r.get(k) for k in keys])
    return "\n".join(out)


def main(argv):
    if len(argv) == 3 and argv[1] == "--one":
        print(one(argv[2]))
        return 0
    if len(argv) == 3:
        print(table(argv[1], argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
