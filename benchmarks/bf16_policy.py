"""bfloat16 checkpoints on DirectML: the three DMLSHIM_BF16 policies, memory and time.

A random Qwen3 (transformers; hidden 256, 4 layers, vocab 2048: about 4.2M
parameters) built with ``torch_dtype=torch.bfloat16``, one forward pass over 64
tokens, one intra-op thread. Variants:

* ``float32`` (default) / ``float16``: ``model.to(device)`` under that policy on the
  emulated DirectML device; the weights live on the device in that dtype;
* ``cpu``: the old rule (bf16 stays on the CPU; a bf16 Parameter cannot move), so the
  model runs in bfloat16 on the CPU, which is what "keep the LLM as a CPU island" costs.

Extra: weight bytes on the device and on the host per policy, and the largest
difference of the logits from the CPU's float32 run. The emulated device computes with
the CPU's kernels: its times show the dtypes' CPU cost, not a GPU's speed.

    python benchmarks/bf16_policy.py [--quick] [--json PATH]
"""
import copy
import os
import sys
import warnings
from pathlib import Path

import torch

import timing

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
import torchvision_ops  # noqa: E402  (transformers imports torchvision; this repo's CI only)

torchvision_ops.apply()

import dmlshim  # noqa: E402
from dmlshim import emulation  # noqa: E402


def build():
    from transformers import AutoModelForCausalLM, Qwen3Config

    cfg = Qwen3Config(vocab_size=2048, hidden_size=256, intermediate_size=768,
                      num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                      head_dim=32, max_position_embeddings=512)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16).eval()


def weight_bytes(model):
    """{"device": bytes, "host": bytes} of the parameters."""
    out = {"device": 0, "host": 0}
    for p in model.parameters():
        out["host" if p.is_cpu else "device"] += p.numel() * p.element_size()
    return out


def main():
    args = timing.arg_parser(__doc__.splitlines()[0]).parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    dev = emulation.install()
    bf16 = build()
    ids = torch.randint(0, 2048, (1, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        reference = copy.deepcopy(bf16).float()(ids).logits
    funcs, memory, errors = {}, {}, {}
    for policy in ("float32", "float16", "cpu"):
        os.environ["DMLSHIM_BF16"] = policy
        dmlshim.deactivate()
        dmlshim.activate()
        model = copy.deepcopy(bf16)
        device = "cpu" if policy == "cpu" else dev    # cpu: a bf16 Parameter cannot move
        model = model.to(device)
        inputs = ids.to(device)

        def forward(model=model, inputs=inputs):
            with torch.no_grad():
                return model(inputs).logits
        memory[policy] = weight_bytes(model)
        errors[policy] = (forward().cpu().float() - reference).abs().max().item()
        funcs[policy] = forward
    dmlshim.deactivate()
    os.environ.pop("DMLSHIM_BF16")
    # each variant's model must run with its own policy active: time them one by one
    timings = {}
    for policy, fn in funcs.items():
        os.environ["DMLSHIM_BF16"] = policy
        dmlshim.activate()
        timings.update(timing.measure({policy: fn}, repeats=3 if args.quick else 10))
        dmlshim.deactivate()
    os.environ.pop("DMLSHIM_BF16")
    note = "; ".join(f"{p}: device {m['device'] / 2**20:.1f} MiB, host {m['host'] / 2**20:.1f} MiB, "
                     f"max |logits - fp32 CPU| {errors[p]:.2e}" for p, m in memory.items())
    rows = timing.rows("Qwen3 4.2M bf16, forward 64 tokens", timings, baseline="float32", note=note)
    timing.finish(args, "bf16_policy", rows, {"weight_bytes": memory, "max_abs_error": errors,
                                              "parameters": sum(p.numel() for p in bf16.parameters()),
                                              "torch": torch.__version__})


if __name__ == "__main__":
    main()
