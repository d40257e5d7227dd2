#!/usr/bin/env python3
"""The GPU session's helper scripts on reports written here, figures worked by hand.

  test_gpu_session_scripts.py REPO_ROOT

compare_band.py: the band is the running maximum of |A - B| in nats, ours is judged by
|ours - pytorch| over it, inside at >= 90 % of the steps; the medians of both per window of steps.
gpu_session_summary.py --one: an emulated rank's peak is compared with NCCL's world-size-1 memory set apart, as validate --check does.
plot_curves.py: the curves that ran are drawn and a missing one named.
distance_from_fp32.py: per window, the median |fp32 A - fp32 B| and each run's median |run - fp32 A|.
"""
import json
import os
import subprocess
import sys
import tempfile

GIB = 1024 ** 3


def write(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)


def run(args):
    return subprocess.run([sys.executable] + args, capture_output=True, text=True)


def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)


def test_band(root, tmp):
    def curve(name, losses):
        path = os.path.join(tmp, name)
        write(path, {"status": "ok", "measured": {"loss": losses}})
        return path
    # Two correct runs differ by 0, 0.01, 0.03, 0.02 nats: the band is 0, 0.01, 0.03, 0.03.
    a = curve("a.json", [3.0, 2.0, 1.0, 0.10])
    b = curve("b.json", [3.0, 2.01, 1.03, 0.12])
    # Ours differs from PyTorch (= a) by 0, 0.005, 0.02, 0.06: ratios 0, 0.5, 0.667, 2 -> 3 of 4 inside.
    ours = curve("ours.json", [3.0, 2.005, 1.02, 0.16])
    out = os.path.join(tmp, "band.json")
    r = run([os.path.join(root, "validation/pytorch/compare_band.py"), a, b, "--ours", ours, "--pytorch", a, "--json", out])
    check(r.returncode == 1, "3 of 4 steps inside (75 %% < 90 %%) is exit 1, got %d: %s" % (r.returncode, r.stderr))
    band = json.load(open(out))
    check(band["band_unit"] == "nats", "the band is in nats")
    check([round(x, 9) for x in band["band"]] == [0.0, 0.01, 0.03, 0.03], "band %s" % band["band"])
    check(band["inside_steps"] == 3, "inside %s" % band["inside_steps"])
    check(abs(band["ratios"][3] - 2.0) < 1e-9, "last ratio %s" % band["ratios"][3])
    check("4 steps: band 0.030000 nats at the end; ours inside it at 3 of 4 steps" in r.stdout, r.stdout)
    # Near a loss of 0 the relative difference explodes (0.02 / 0.10 = 20 %) while the absolute one stays put.
    check(" 20.000" in r.stdout, "the relative column is printed beside the band")
    # Default windows (1-50, 51-100, 101-): 4 steps make one window, 1-4. Median of |A - B|
    # {0, 0.01, 0.02, 0.03} is 0.015; of |ours - pytorch| {0, 0.005, 0.02, 0.06}, 0.0125.
    check(len(band["windows"]) == 1 and band["windows"][0]["first_step"] == 1 and band["windows"][0]["last_step"] == 4,
          "windows %s" % band["windows"])
    check(abs(band["windows"][0]["median_a_vs_b_nats"] - 0.015) < 1e-12, "median %s" % band["windows"])
    check(abs(band["windows"][0]["median_ours_vs_pytorch_nats"] - 0.0125) < 1e-12, "median %s" % band["windows"])
    # --windows 2: steps 1-2 (medians 0.005 and 0.0025: 0.50 x) and 3-4 (0.025 and 0.04: 1.60 x).
    r = run([os.path.join(root, "validation/pytorch/compare_band.py"), a, b, "--ours", ours, "--pytorch", a,
             "--windows", "2"])
    check("# steps 1-2: median |A - B| 0.005000 nats, median |ours - pytorch| 0.002500 nats (0.50 x)" in r.stdout, r.stdout)
    check("# steps 3-4: median |A - B| 0.025000 nats, median |ours - pytorch| 0.040000 nats (1.60 x)" in r.stdout, r.stdout)
    r = run([os.path.join(root, "validation/pytorch/compare_band.py"), a, b, "--windows", "0"])
    check(r.returncode == 2 and "--windows" in r.stderr, "--windows 0 is bad input: %d %s" % (r.returncode, r.stderr))


def test_summary_sets_nccl_apart(root, tmp):
    nccl = 606076928
    pred = 4399200256
    report = {"mode": "device", "status": "ok",
              "parallel": {"backend": "emulated", "nccl_world1_bytes": nccl},
              "measured": {"peak_bytes": pred + nccl, "overhead_bytes": 1, "device_used_peak_bytes": pred + nccl,
                           "step_time_s": 0.1, "tokens_per_s": 1000.0, "mfu": 0.5, "loss": [], "attention_backend": "cudnn"},
              "predicted": {"peak_bytes": pred, "step_time_s": 0.1, "emulated_step_time_s": 0.08, "mfu": 0.5}}
    path = os.path.join(tmp, "rank.json")
    write(path, report)
    r = run([os.path.join(root, "validation/gpu_session/gpu_session_summary.py"), "--one", path])
    check(r.returncode == 0, "summary exit %d: %s" % (r.returncode, r.stderr))
    # 606,076,928 B = 0.56 GiB; with it set apart both peaks equal the prediction, 4.10 GiB.
    check("peak less NCCL's 0.56 GiB 4.10 GiB vs predicted 4.10 GiB (+0.00%)" in r.stdout, r.stdout)
    check("driver peak 4.10 GiB (+0.00%)" in r.stdout, r.stdout)
    # Its step is judged against its own stage's work alone: 0.1 / 0.08 - 1 = +25 %.
    check("step 0.1000 s vs predicted (this stage alone) 0.0800 s (+25.0%)" in r.stdout, r.stdout)


def test_plot_keeps_the_curves_that_ran(root, tmp):
    # A run the budget skipped has no report: the others are still drawn, the missing one named.
    ran = os.path.join(tmp, "ran.json")
    write(ran, {"status": "ok", "measured": {"loss": [5.5, 4.0, 2.5]}})
    svg = os.path.join(tmp, "curves.svg")
    plot = os.path.join(root, "validation/pytorch/plot_curves.py")
    r = run([plot, svg, "ours=" + ran, "PyTorch fp32=" + os.path.join(tmp, "absent.json")])
    check(r.returncode == 0, "plot exit %d: %s" % (r.returncode, r.stderr))
    text = open(svg).read()
    check(text.count("<polyline") == 1 and "not run: PyTorch fp32" in text and "loss (nats)" in text, text[:400])
    # Three points from x = 60 to x = 700 (720 wide, 60 left and 20 right margins): the middle one at 380.
    check("380.0," in text, "middle point at x 380")
    r = run([plot, svg, "none=" + os.path.join(tmp, "absent.json")])
    check(r.returncode == 2, "no curve at all is exit 2, got %d" % r.returncode)


def test_distance_from_fp32(root, tmp):
    def curve(name, losses):
        path = os.path.join(tmp, name)
        write(path, {"status": "ok", "measured": {"loss": losses}})
        return path
    script = os.path.join(root, "validation/pytorch/distance_from_fp32.py")
    a = curve("fp32a.json", [3.0, 2.0, 1.0, 0.5])
    b = curve("fp32b.json", [3.0, 2.002, 1.0, 0.5])
    x = curve("x.json", [3.01, 2.0, 1.04, 0.4])
    out = os.path.join(tmp, "far.json")
    r = run([script, a, b, "bf16=" + x, "--windows", "2", "--json", out])
    check(r.returncode == 0, "exit %d: %s" % (r.returncode, r.stderr))
    far = json.load(open(out))
    w = far["windows"]
    check([(v["first_step"], v["last_step"]) for v in w] == [(1, 2), (3, 4)], "windows %s" % w)
    # Steps 1-2: the pair differs by {0, 0.002} -> median 0.001; the run by {0.01, 0} -> 0.005.
    # Steps 3-4: the pair by {0, 0} -> 0; the run by {0.04, 0.1} -> 0.07.
    check(abs(w[0]["fp32_pair"] - 0.001) < 1e-12 and abs(w[0]["runs"]["bf16"] - 0.005) < 1e-12, "window 1 %s" % w[0])
    check(abs(w[1]["fp32_pair"]) < 1e-12 and abs(w[1]["runs"]["bf16"] - 0.07) < 1e-12, "window 2 %s" % w[1])
    check("3-4          0.000000   0.070000" in r.stdout, r.stdout)
    r = run([script, a, b, x])
    check(r.returncode == 2 and "LABEL=REPORT" in r.stderr, "a run without its label is bad input: %s" % r.stderr)
    r = run([script, a, b, "bf16=" + x, "--windows", "0"])
    check(r.returncode == 2 and "--windows" in r.stderr, "--windows 0 is bad input: %s" % r.stderr)


def main():
    root = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        test_band(root, tmp)
        test_summary_sets_nccl_apart(root, tmp)
        test_plot_keeps_the_curves_that_ran(root, tmp)
        test_distance_from_fp32(root, tmp)
    print("ok")


if __name__ == "__main__":
    main()
