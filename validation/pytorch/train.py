#!/usr/bin/env python3
"""PyTorch ground truth for `preflight validate --check`.

Builds a Hugging Face transformers causal LM (LlamaForCausalLM, GPT2LMHeadModel, ...)
from a config.json with random weights (nothing is downloaded), trains it on synthetic
tokens with the given single-GPU plan, and writes a run report in the schema of
`preflight run --report` with "source": "pytorch", so `preflight validate --check`
predicts it with the planner's "pytorch" profile.

Plan mapping:
  fp32                   fp32 parameters, no autocast
  bf16-mixed             fp32 parameters, torch.autocast(bfloat16)
  bf16-mixed-fp32-grads  the same as bf16-mixed (autocast gradients are already fp32)
  bf16                   model.to(bfloat16), no autocast, AdamW moments in bf16
  --recompute full       model.gradient_checkpointing_enable() (non-reentrant)
  --recompute selective  not available in HF transformers: exit 2
  --attention flash      SDPA restricted to FlashAttention (the memory-efficient kernel for
                         fp32, which FlashAttention does not take)
  --attention eager      attn_implementation="eager"

Exit codes: 0 ok; 1 out of memory (report written, status "allocation-failed");
2 bad input; 3 no GPU, or torch/transformers missing or failing (report written when
the model got as far as the GPU, status "error").
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(os.path.dirname(SCRIPT_DIR))
PRECISIONS = ("fp32", "bf16-mixed", "bf16-mixed-fp32-grads", "bf16")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="Hugging Face config.json")
    p.add_argument("--model-name", help="name recorded in the report (default: the config's file stem)")
    p.add_argument("--gpu", default="h100-sxm-80gb", help="Preflight GPU spec name the predictions use")
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--mbs", type=int, default=1)
    p.add_argument("--grad-acc", type=int, default=1)
    p.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    p.add_argument("--precision", choices=PRECISIONS, default="bf16-mixed")
    p.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    p.add_argument("--attention", choices=("flash", "eager"), default="flash")
    p.add_argument("--steps", type=int, default=10, help="measured steps (median step time)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps excluded from timing")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--report", required=True, help="where to write the JSON report")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (default mode); compilation happens in the warm-up steps")
    p.add_argument("--init-from", help="start from the parameters `preflight run --save-init FILE` wrote (FILE and "
                   "FILE.json): the same initial weights as the Preflight runtime")
    p.add_argument("--data", choices=("random", "preflight"), default="random",
                   help="random: uniform token ids (default); preflight: the Preflight runtime's synthetic "
                        "sequences for --seed (runtime/include/preflight/runtime/synthetic.hpp), tokens at "
                        "positions 0..s-1 and labels 1..s, loss over all s positions as the runtime's")
    p.add_argument("--split", type=int, default=1,
                   help="the band of two correct runs: process each micro-batch as SPLIT chunks of mbs/SPLIT rows "
                        "with their gradients summed (the same data, model and recipe; only the reduction order "
                        "changes). Compare with the same run at --split 1 (validation/pytorch/compare_band.py)")
    p.add_argument("--bf16-residual", action="store_true",
                   help="diagnostic, bf16-mixed only: round the residual stream and its gradient to bf16 at "
                        "every norm's input, as the Preflight runtime keeps them (autocast keeps both in fp32)")
    p.add_argument("--bf16-param-grads", action="store_true",
                   help="diagnostic, bf16-mixed only: round every parameter's gradient to bf16 before it is "
                        "accumulated, as the Preflight runtime stores them (autocast's are fp32: the norm weights', "
                        "the embedding's scatter and, tied, its sum with the head's). With --bf16-residual, "
                        "PyTorch rounds where the runtime does")
    p.add_argument("--bf16-norm-weights", action="store_true",
                   help="diagnostic, bf16-mixed only: every norm multiplies by its weight (and bias) rounded to "
                        "bf16, forward and input gradient, as the Preflight runtime reads the bf16 copy; the "
                        "weight's own gradient and update stay as they are (autocast uses the fp32 parameter)")
    a = p.parse_args(argv)
    for name in ("seq", "mbs", "grad_acc", "steps"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if a.warmup < 0:
        p.error("--warmup must be 0 or more")
    if a.split < 1 or a.mbs % a.split != 0:
        p.error("--split must be at least 1 and divide --mbs")
    if a.bf16_residual and a.precision not in ("bf16-mixed", "bf16-mixed-fp32-grads"):
        p.error("--bf16-residual needs --precision bf16-mixed or bf16-mixed-fp32-grads")
    if a.bf16_param_grads and a.precision not in ("bf16-mixed", "bf16-mixed-fp32-grads"):
        p.error("--bf16-param-grads needs --precision bf16-mixed or bf16-mixed-fp32-grads")
    if a.bf16_norm_weights and a.precision not in ("bf16-mixed", "bf16-mixed-fp32-grads"):
        p.error("--bf16-norm-weights needs --precision bf16-mixed or bf16-mixed-fp32-grads")
    return a


def write_atomic(path, doc):
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), "." + os.path.basename(path) + ".tmp.%d" % os.getpid())
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def plan_json(a):
    return {"seq": a.seq, "mbs": a.mbs, "grad_acc": a.grad_acc, "dp": 1, "tp": 1, "pp": 1, "sp": False, "zero": 0,
            "recompute": a.recompute, "precision": a.precision, "optimizer": a.optimizer,
            "attention": a.attention, "dropout": 0.0}


def gpu_spec(name):
    path = name if name.endswith(".json") else os.path.join(REPO_DIR, "data", "gpus", name + ".json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def model_flops_per_step(cfg, a):
    """Model FLOPs per step in the planner's convention (planner/src/flops.cpp): 2 FLOPs per
    multiply-add, GEMMs and both attention matmuls counted over the full s x s scores,
    backward = 2 x forward, recompute not counted."""
    h = cfg["hidden"]
    qw = cfg["heads"] * cfg["head_dim"]
    kvw = cfg["kv_heads"] * cfg["head_dim"]
    mlp = (6 if cfg["swiglu"] else 4) * h * cfg["ffn"]
    layer = 2 * h * (qw + 2 * kvw) + 2 * qw * h + mlp + 2 * (2 * a.seq * qw)
    forward = cfg["layers"] * layer + 2 * h * cfg["vocab"]
    return 3.0 * forward * a.seq * a.mbs * a.grad_acc


def shape_of(hf):
    """Hidden sizes from the config in the planner's terms (GPT-2 or Llama-style keys)."""
    if hf.get("model_type") == "gpt2":
        h = hf["n_embd"]
        heads = hf["n_head"]
        return {"hidden": h, "layers": hf["n_layer"], "heads": heads, "kv_heads": heads, "head_dim": h // heads,
                "ffn": hf.get("n_inner") or 4 * h, "vocab": hf["vocab_size"], "swiglu": False}
    h = hf["hidden_size"]
    heads = hf["num_attention_heads"]
    return {"hidden": h, "layers": hf["num_hidden_layers"], "heads": heads,
            "kv_heads": hf.get("num_key_value_heads") or heads, "head_dim": hf.get("head_dim") or h // heads,
            "ffn": hf["intermediate_size"], "vocab": hf["vocab_size"], "swiglu": True}


MASK64 = (1 << 64) - 1


def mix64(x):
    """SplitMix64, as runtime/include/preflight/runtime/synthetic.hpp."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def preflight_tokens(seed, step, micro_batch, rows, positions, vocab):
    """The runtime's synthetic_token() for rows x positions (positions 0..n-1), 1-based step and micro-batch."""
    v = min(vocab, 256)
    stride = 1 + mix64(seed & MASK64) % 7
    out = []
    for row in range(rows):
        key = mix64((seed ^ mix64((step * 1000003 + micro_batch * 7919 + row) & MASK64)) & MASK64)
        start = key % v
        out.append([(start + t * stride) % v for t in range(positions)])
    return out


def load_preflight_init(model, path, model_type, shape):
    """Copies the runtime's initial parameters (fp32 flat file + index) into the HF model."""
    import numpy as np
    import torch
    with open(path + ".json") as f:
        idx = json.load(f)
    flat = np.fromfile(path, dtype="<f4")
    params = dict(model.named_parameters())
    h, qw, kvw = shape["hidden"], shape["heads"] * shape["head_dim"], shape["kv_heads"] * shape["head_dim"]
    vocab = shape["vocab"]

    def tensor(t):
        a = flat[t["offset"]:t["offset"] + t["rows"] * t["cols"]].reshape(t["rows"], t["cols"])
        return torch.from_numpy(a.copy())

    def put(name, value):
        p = params[name]
        if tuple(p.shape) != tuple(value.shape):
            raise ValueError("init %s: shape %s, file has %s" % (name, tuple(p.shape), tuple(value.shape)))
        with torch.no_grad():
            p.copy_(value.to(p.dtype))

    gpt2 = model_type == "gpt2"
    for t in idx["tensors"]:
        n, v = t["name"], tensor(t)
        if n == "word_embedding":
            put("transformer.wte.weight" if gpt2 else "model.embed_tokens.weight", v[:vocab])
        elif n == "position_embedding":
            put("transformer.wpe.weight", v)
        elif n == "lm_head.weight":
            put("lm_head.weight", v[:vocab])
        elif n.startswith("final_norm."):
            put(("transformer.ln_f." if gpt2 else "model.norm.") + n.split(".")[-1], v.reshape(-1))
        elif n.startswith("layers."):
            _, l, mod, kind = n.split(".")
            i = int(l) - 1
            if gpt2:
                base = "transformer.h.%d." % i
                m = {"attn_norm": "ln_1", "mlp_norm": "ln_2", "qkv_proj": "attn.c_attn", "o_proj": "attn.c_proj",
                     "fc1": "mlp.c_fc", "fc2": "mlp.c_proj"}[mod]
                if kind == "weight" and t["cols"] > 1:
                    put(base + m + ".weight", v.t().contiguous())  # Conv1D: [in, out]
                else:
                    put(base + m + "." + kind, v.reshape(-1))
            else:
                base = "model.layers.%d." % i
                if mod == "qkv_proj":
                    parts = (("q_proj", 0, qw), ("k_proj", qw, qw + kvw), ("v_proj", qw + kvw, qw + 2 * kvw))
                    for hf, a0, a1 in parts:
                        put(base + "self_attn.%s.%s" % (hf, kind), v[a0:a1] if kind == "weight" else v[a0:a1].reshape(-1))
                elif mod == "gate_up_proj":
                    f = t["rows"] // 2
                    for hf, a0, a1 in (("gate_proj", 0, f), ("up_proj", f, 2 * f)):
                        put(base + "mlp.%s.%s" % (hf, kind), v[a0:a1] if kind == "weight" else v[a0:a1].reshape(-1))
                else:
                    m = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm",
                         "o_proj": "self_attn.o_proj", "down_proj": "mlp.down_proj"}[mod]
                    put(base + m + "." + kind, v if t["cols"] > 1 else v.reshape(-1))
        else:
            raise ValueError("init: unknown tensor %s" % n)


def register_causal_sdpa(transformers, torch, expand_kv):
    """Registers SDPA with is_causal=True and no mask (KV heads repeated to the query heads
    first when expand_kv, else SDPA's enable_gqa); returns the implementation's name."""
    def causal_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        groups = query.shape[1] // key.shape[1]
        if expand_kv and groups > 1:
            key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, dropout_p=dropout, scale=scaling, is_causal=True,
            enable_gqa=query.shape[1] != key.shape[1])
        return out.transpose(1, 2).contiguous(), None
    name = "preflight_causal_sdpa_expanded" if expand_kv else "preflight_causal_sdpa"
    transformers.AttentionInterface.register(name, causal_sdpa)
    return name


def round_residual_stream_to_bf16(model, torch):
    """Every norm's input is the residual stream (layer inputs, the mid-layer sum, the last
    layer's output): round it to bf16 in place, so the residual carried past the norm is rounded
    too, and round the gradient that flows back into it. The Preflight runtime's bf16-mixed keeps
    the residual and its gradient in bf16 (runtime/src/program_builder.hpp: every activation at
    the activation dtype); autocast keeps both in fp32."""
    def round_input(module, args):
        x = args[0]
        if x.dtype == torch.float32:
            with torch.no_grad():
                x.copy_(x.to(torch.bfloat16).to(torch.float32))
            if x.requires_grad:
                x.register_hook(lambda g: g.to(torch.bfloat16).to(torch.float32))
    norms = norm_modules(model)
    for m in norms:
        m.register_forward_pre_hook(round_input)
    print("train.py: --bf16-residual: rounding at %d norm inputs" % len(norms), file=sys.stderr)


def norm_modules(model):
    return [m for n, m in model.named_modules() if n.endswith("norm") or n.endswith("layernorm")
            or n.endswith(".ln_1") or n.endswith(".ln_2") or n.endswith(".ln_f")]


def round_norm_weights_to_bf16(model, torch):
    """Each norm's weight (and bias) as the forward reads it: rounded to bf16, the value the Preflight
    runtime's norm kernels read from the bf16 weight copy (runtime/kernels/norm.cu, forward and input
    gradient), while the optimizer updates the fp32 parameter. A parametrization whose value is
    round(w) and whose derivative is 1 (straight-through), so the weight's gradient is the one the
    fp32 weight would get, as the runtime's norm_bwd_weights_kernel computes it. Near 1.0, where RMSNorm
    weights start, bf16's spacing is 2^-8 below and 2^-7 above: steps of lr 1e-3 move the rounded
    value only every few steps. Autocast multiplies by the fp32 parameter."""
    from torch.nn.utils import parametrize

    class RoundToBf16(torch.nn.Module):
        def forward(self, w):
            return w + (w.detach().to(torch.bfloat16).to(w.dtype) - w.detach())

    count = 0
    for m in norm_modules(model):
        for name in ("weight", "bias"):
            if isinstance(getattr(m, name, None), torch.nn.Parameter):
                parametrize.register_parametrization(m, name, RoundToBf16())
                count += 1
    print("train.py: --bf16-norm-weights: rounding %d norm parameters as the forward reads them" % count,
          file=sys.stderr)


def round_param_grads_to_bf16(model, torch):
    """Each backward's gradient of every parameter rounded to bf16 before it is accumulated into
    .grad: the Preflight runtime's bf16-mixed writes every gradient in bf16 (the norm weights' in
    norm_bwd_weights_kernel, runtime/kernels/norm.cu; the embedding's rows, summed in fp32 over
    the tokens and added once to the bf16 gradient that already holds a tied head's, in
    embedding_bwd_kernel, runtime/kernels/embedding.cu). Autocast's matrix gradients come out of
    bf16 GEMMs already; the norm weights' and the embedding's are fp32. A tensor hook on a leaf
    sees the sum of all its uses (a tied weight's two), as the runtime's single bf16 add does."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.register_hook(lambda g: g.to(torch.bfloat16).to(g.dtype))
    print("train.py: --bf16-param-grads: rounding the gradients of %d parameters" % len(params), file=sys.stderr)


def main(argv):
    a = parse_args(argv)
    if a.recompute == "selective":
        print("train.py: HF transformers has no selective (attention-core) recompute; use none or full",
              file=sys.stderr)
        return 2
    try:
        with open(a.config) as f:
            hf = json.load(f)
    except (OSError, ValueError) as e:
        print("train.py: --config: %s" % e, file=sys.stderr)
        return 2
    name = a.model_name or os.path.splitext(os.path.basename(a.config))[0]
    report = {"schema_version": 1, "command": "run", "source": "pytorch", "mode": "device", "status": "ok",
              "split": a.split,
              "model": {"name": name}, "gpu": {"name": a.gpu}, "plan": plan_json(a), "steps": a.steps,
              "seed": a.seed, "device": None, "predicted": {"profile": "pytorch"},
              "measured": {"source": "pytorch"}}
    # The driver's baseline: device memory in use before this process creates a CUDA context (NVML).
    nvml_handle, nvml_before = None, None
    try:
        import pynvml
        pynvml.nvmlInit()
        nvml_handle = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0))
        nvml_before = int(pynvml.nvmlDeviceGetMemoryInfo(nvml_handle).used)
    except Exception as e:  # no pynvml / driver: the baseline is taken after the context instead
        report["measured"]["nvml"] = "unavailable: %s" % e
    try:
        import torch
        import transformers
    except ImportError as e:
        print("train.py: %s (torch and transformers are needed)" % e, file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("train.py: no CUDA device", file=sys.stderr)
        return 3

    torch.manual_seed(a.seed)
    dev = torch.device("cuda", 0)
    # NVML's "used" counts the driver's reserved memory, which cudaMemGetInfo's total - free
    # leaves out (503,316,480 B on an H100, 644,939,776 B on an H200), so the baseline the driver
    # samples subtract is put in cudaMemGetInfo's book: used after the context minus the context
    # as NVML counts it (the runtime's create_context in runtime/cuda/executor.cpp does the same).
    baseline = None
    if nvml_before is not None:
        free_b, total_b = torch.cuda.mem_get_info(dev)  # creates the context
        try:
            context_b = int(pynvml.nvmlDeviceGetMemoryInfo(nvml_handle).used) - nvml_before
            baseline = int(total_b - free_b) - context_b
            report["measured"]["context_bytes"] = context_b
        except Exception:
            baseline = None
    props = torch.cuda.get_device_properties(dev)
    report["device"] = {"name": props.name, "memory_bytes": int(props.total_memory),
                        "compute_capability": props.major * 10 + props.minor,
                        "runtime": torch.version.cuda, "driver": None,
                        "torch": torch.__version__, "transformers": transformers.__version__}

    # The config as given, minus Preflight's own annotations; no dropout (the plan's dropout is 0).
    cfg_dict = {k: v for k, v in hf.items() if not k.startswith("_preflight")}
    for key in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout", "hidden_dropout", "dropout"):
        if key in cfg_dict:
            cfg_dict[key] = 0.0
    cfg_dict["use_cache"] = False
    model_type = cfg_dict.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **cfg_dict)
    pure_bf16 = a.precision == "bf16"
    amp = a.precision in ("bf16-mixed", "bf16-mixed-fp32-grads")
    impl = "sdpa" if a.attention == "flash" else "eager"
    if a.attention == "flash" and (a.compile or a.precision == "fp32"):
        # Under torch.compile, transformers' "sdpa" path materialises a boolean causal mask (its
        # skip-the-mask shortcut is off while tracing), which FlashAttention refuses; in fp32 it
        # asks SDPA for grouped-query attention (enable_gqa), which the memory-efficient kernel
        # refuses. A registered attention function gets no mask (transformers creates none for
        # implementations it has no mask function for) and asks SDPA for causal attention, as
        # eager "sdpa" does; for fp32 it repeats the KV heads first (transformers' repeat_kv).
        impl = register_causal_sdpa(transformers, torch, expand_kv=a.precision == "fp32")
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation=impl, torch_dtype=torch.bfloat16 if pure_bf16 else torch.float32)
    shape = shape_of(hf)
    report["model"]["params"] = sum(p.numel() for p in model.parameters())
    if a.init_from:
        load_preflight_init(model, a.init_from, model_type, shape)
        report["measured"]["init_from"] = a.init_from
    model.to(dev)
    model.train()
    if a.bf16_residual:
        round_residual_stream_to_bf16(model, torch)
        report["measured"]["bf16_residual"] = True
    if a.bf16_norm_weights:  # before the gradient hooks: they go on the parameters it keeps
        round_norm_weights_to_bf16(model, torch)
        report["measured"]["bf16_norm_weights"] = True
    if a.bf16_param_grads:
        round_param_grads_to_bf16(model, torch)
        report["measured"]["bf16_param_grads"] = True
    if a.recompute == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    report["measured"]["compiled"] = bool(a.compile)
    report["measured"]["attn_implementation"] = impl
    if a.compile:
        model = torch.compile(model)
    # Weight decay on the matrices (embeddings, projections, head) only, not on norm weights and
    # biases: the Preflight runtime's decay flags (runtime/src/program.cpp). AdamW decouples it;
    # SGD adds it to the gradient before the momentum, as the runtime's sgd_kernel does.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    if a.optimizer == "adamw":
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    else:
        opt = torch.optim.SGD(groups, lr=a.lr, momentum=0.9)

    # SDPA backend: FlashAttention for 16-bit inputs, the memory-efficient kernel for fp32.
    from contextlib import nullcontext
    sdpa = nullcontext()
    backend = "eager"
    if a.attention == "flash":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        kind = SDPBackend.EFFICIENT_ATTENTION if a.precision == "fp32" else SDPBackend.FLASH_ATTENTION
        sdpa = sdpa_kernel(kind)
        backend = "efficient" if a.precision == "fp32" else "flash"
    report["measured"]["sdpa_backend"] = backend

    gen = torch.Generator(device="cpu").manual_seed(a.seed)
    batches = [torch.randint(0, shape["vocab"], (a.mbs, a.seq), generator=gen).to(dev) for _ in range(a.grad_acc)]

    def step_batches(step):
        """(input ids, labels or None) per micro-batch of 1-based optimizer step `step`."""
        if a.data == "random":
            return [(ids, None) for ids in batches]
        out = []
        for mb in range(1, a.grad_acc + 1):
            seqs = preflight_tokens(a.seed, step, mb, a.mbs, a.seq + 1, shape["vocab"])
            t = torch.tensor(seqs, dtype=torch.long, device=dev)
            out.append((t[:, :-1].contiguous(), t[:, 1:].contiguous()))
        return out

    driver_used = []  # device used (total - free) after each step

    def device_used():
        free_b, total_b = torch.cuda.mem_get_info(dev)
        return int(total_b - free_b)

    times, losses = [], []
    try:
        with sdpa:
            for step in range(a.warmup + a.steps):
                torch.cuda.synchronize(dev)
                t0 = time.perf_counter()
                total = 0.0
                for ids_all, labels_all in step_batches(step + 1):
                    rows = a.mbs // a.split  # --split: the same micro-batch in chunks, gradients summed
                    for c in range(a.split):
                        ids = ids_all[c * rows:(c + 1) * rows]
                        labels = None if labels_all is None else labels_all[c * rows:(c + 1) * rows]
                        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                            if labels is None:
                                outputs = model(input_ids=ids, labels=ids)
                                loss = outputs.loss / (a.grad_acc * a.split)
                            else:  # the runtime's loss: mean cross-entropy over all s positions
                                outputs = model(input_ids=ids)
                                loss = torch.nn.functional.cross_entropy(
                                    outputs.logits.float().view(-1, outputs.logits.shape[-1]),
                                    labels.reshape(-1)) / (a.grad_acc * a.split)
                        # `outputs` (with its logits) stays referenced through backward, as in the
                        # usual `outputs = model(**batch); outputs.loss.backward()` loop.
                        loss.backward()
                        total += float(loss.detach())
                        del outputs, loss
                opt.step()
                opt.zero_grad(set_to_none=True)
                torch.cuda.synchronize(dev)
                times.append(time.perf_counter() - t0)
                driver_used.append(device_used())
                losses.append(total)
                print("train.py: step %d/%d loss %.4f %.4f s%s" % (step + 1, a.warmup + a.steps, total, times[-1],
                      " (warm-up)" if step < a.warmup else ""), file=sys.stderr)
    except torch.cuda.OutOfMemoryError as e:
        report["status"] = "allocation-failed"
        report["failure"] = {"message": str(e).splitlines()[0] if str(e) else "CUDA out of memory"}
    except Exception as e:  # a device or library failure: recorded, not hidden
        report["status"] = "error"
        report["failure"] = {"message": "%s: %s" % (type(e).__name__, e)}

    m = report["measured"]
    m["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated(dev))
    m["max_memory_reserved_bytes"] = int(torch.cuda.max_memory_reserved(dev))
    # The tensor peak compared with the planner (same key as the runtime's tracking allocator).
    m["tracked_peak_bytes"] = m["max_memory_allocated_bytes"]
    m["peak_bytes"] = m["max_memory_allocated_bytes"]
    free, total_mem = torch.cuda.mem_get_info(dev)
    # Device memory outside PyTorch's allocator: CUDA context, library workspaces not in the pool.
    m["overhead_bytes"] = int(total_mem - free - torch.cuda.memory_reserved(dev))
    # The driver's figure, as the runtime reports it: device used (total - free) after each
    # step, largest, minus the memory in use before this process's context (in cudaMemGetInfo's terms).
    if driver_used:
        base = baseline
        m["driver"] = {"baseline_bytes": base,
                       "baseline_source": "nvml-before-context" if base is not None else None,
                       "used_peak_bytes": max(driver_used) - base if base is not None else None,
                       "after_warmup_bytes": driver_used[0] - base if base is not None else None,
                       "pool_reserved_peak_bytes": m["max_memory_reserved_bytes"]}
        m["device_used_peak_bytes"] = m["driver"]["used_peak_bytes"]
        if nvml_handle is not None:
            try:
                m["driver"]["nvml_used_bytes_at_end"] = int(pynvml.nvmlDeviceGetMemoryInfo(nvml_handle).used) - nvml_before
            except Exception:
                pass
    m["warmup_steps"] = a.warmup
    m["step_times_s"] = times
    m["loss"] = losses
    measured = times[a.warmup:]
    m["step_time_s"] = statistics.median(measured) if report["status"] == "ok" and measured else None
    tokens = a.seq * a.mbs * a.grad_acc
    m["tokens_per_s"] = tokens / m["step_time_s"] if m["step_time_s"] else None
    m["mfu"] = None
    spec = gpu_spec(a.gpu)
    if spec and m["step_time_s"]:
        peak = spec.get("peak_fp32_flops_per_s") if a.precision == "fp32" else spec.get("peak_bf16_flops_per_s")
        if peak:
            m["mfu"] = model_flops_per_step(shape, a) / (m["step_time_s"] * peak)
    if losses and not all(math.isfinite(x) for x in losses):
        report["status"] = "error"
        report.setdefault("failure", {"message": "non-finite loss"})
    write_atomic(a.report, report)
    if report["status"] == "allocation-failed":
        return 1
    return 0 if report["status"] == "ok" else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
