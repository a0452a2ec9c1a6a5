"""bfloat16 on DirectML: ``DMLSHIM_BF16`` = float32 (default) | float16 | cpu (issue 20).

DirectML aborts the process on a bfloat16 tensor (failure_modes.md #8, DirectML#688;
the emulator raises ``FatalDirectMLError``). Qwen3-ASR, GLM-ASR and Fun-ASR-Nano's
``llm_dtype: bf16`` load their LLM in bfloat16. With dmlshim a bf16 model moved to
the device computes there in float32 (or float16 by choice), with one warning;
``cpu`` keeps the old rule (bf16 tensors are CPU islands, a bf16 Parameter raises).
A tiny random Qwen3 (transformers) built with ``torch_dtype=torch.bfloat16``.
"""
import copy
import signal
import subprocess
import sys
import warnings

import pytest
import torch

import dmlshim
from dmlshim import emulation
from dmlshim.emulation import FatalDirectMLError

import torchvision_ops  # noqa: F401  (examples/, applied by conftest: transformers imports torchvision)

IDS = torch.tensor([[1, 5, 9, 3, 7, 2]])


@pytest.fixture(scope="module")
def qwen3():
    """(bf16 model, its float32 copy): the CPU float32 run is the reference."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    cfg = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                      max_position_embeddings=128, initializer_range=0.1, eos_token_id=0,
                      pad_token_id=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16).eval()
    assert next(model.parameters()).dtype is torch.bfloat16
    return model, copy.deepcopy(model).float()


def run(model, device):
    """(logits (1, 6, 64), 6 greedy tokens (1, 12)) of ``model`` on ``device``, on the CPU."""
    model = copy.deepcopy(model).to(device)
    with torch.no_grad():
        logits = model(IDS.to(device)).logits
        tokens = model.generate(IDS.to(device), max_new_tokens=6, min_new_tokens=6,
                                do_sample=False, pad_token_id=0)
    return logits.cpu(), tokens.cpu()


@pytest.fixture
def bf16_shim(monkeypatch):
    """dmlshim active with DMLSHIM_BF16 set by the test (``policy(value)``)."""
    def activate(value):
        monkeypatch.setenv("DMLSHIM_BF16", value)
        dmlshim.deactivate()
        dmlshim.activate()
        dmlshim.trace.reset()
    yield activate
    dmlshim.deactivate()


# A bf16 tensor on the real binary aborts the process (#8): it is reproduced in a child.
_ABORT_IN_CHILD = """
import torch, torch_directml
torch.ones(4, dtype=torch.bfloat16).to(torch_directml.device()) + 1
"""


def test_without_shim_bf16_aborts_on_the_device(qwen3, dml_device):
    assert not dmlshim.is_active()
    if not emulation.is_installed():
        child = subprocess.run([sys.executable, "-c", _ABORT_IN_CHILD], capture_output=True,
                               text=True, timeout=120)
        assert child.returncode == -signal.SIGABRT, (child.returncode, child.stderr[-2000:])
        return
    with pytest.raises(FatalDirectMLError, match="BFloat16"):
        run(qwen3[0], dml_device)


@pytest.mark.parametrize("policy, dtype", [("float32", torch.float32), ("float16", torch.float16)])
def test_bf16_qwen3_runs_on_the_device(policy, dtype, qwen3, dml_device, bf16_shim, assert_parity,
                                      profile):
    model, reference = qwen3
    ref_logits, ref_tokens = run(reference, "cpu")
    bf16_shim(policy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        on_device = copy.deepcopy(model).to(dml_device)
        logits, tokens = run(model, dml_device)
    params = list(on_device.parameters())
    assert all(p.device == dml_device and p.dtype is dtype for p in params)
    assert not any(dmlshim.islands.is_island(p) for p in params)     # on the GPU, not the CPU
    bf16 = [w for w in caught if "cannot hold bfloat16" in str(w.message)]
    assert len(bf16) == 1 and f"computed as {policy}" in str(bf16[0].message)
    assert logits.dtype is dtype
    assert_parity(logits, ref_logits.to(dtype), profile="device")
    if policy == "float32":
        # Token ids are exact in every profile up to the first generated one; later greedy
        # steps of a random model may flip on a near-tie under a GPU's rounding (seen on the
        # real binary), so only the exact profile holds the whole sequence.
        upto = None if profile == "exact" else IDS.shape[1] + 1
        assert_parity(tokens[:, :upto], ref_tokens[:, :upto])
    rows = {r["op"]: r["actions"] for r in dmlshim.report().rows}
    assert rows["Tensor.to"].get("coerce", 0) >= len(params)


def test_bf16_computed_in_forward_follows_the_policy(dml_device, bf16_shim, assert_same):
    bf16_shim("float16")
    x = torch.arange(6.0).to(dml_device)
    made = [x.to(torch.bfloat16), x.bfloat16(), x.type(torch.bfloat16),
            torch.zeros(3, dtype=torch.bfloat16, device=dml_device),
            torch.softmax(x, 0, dtype=torch.bfloat16)]
    assert all(t.device == dml_device and t.dtype is torch.float16 for t in made)
    assert_same(made[0], torch.arange(6.0).half())
    # the CPU is untouched: bfloat16 stays bfloat16 there
    assert torch.ones(2).bfloat16().dtype is torch.bfloat16
    assert torch.zeros(2, dtype=torch.bfloat16).dtype is torch.bfloat16


def test_bf16_cpu_policy_keeps_islands(qwen3, dml_device, bf16_shim):
    bf16_shim("cpu")
    island = torch.ones(3, dtype=torch.bfloat16).to(dml_device)
    assert dmlshim.islands.is_island(island) and island.dtype is torch.bfloat16
    with pytest.raises(TypeError, match="bfloat16 parameter cannot go to"):
        copy.deepcopy(qwen3[0]).to(dml_device)


def test_bad_bf16_value_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("DMLSHIM_BF16", "bf16")
    with pytest.raises(ValueError, match=r"DMLSHIM_BF16='bf16': allowed values are float32, "
                                         r"float16, cpu"):
        dmlshim.activate()
    assert not dmlshim.is_active()
