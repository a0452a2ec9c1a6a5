"""GFPGAN 1.3.8 (basicsr 1.4.2, facexlib 0.3.0) on the DirectML device, against the CPU.

Real library code throughout: random-weight models built with gfpgan's and facexlib's
own classes (examples/gfpgan_models.py) and loaded through ``GFPGANer``'s loader.
``conftest.py`` makes the registry's CUDA-only torchvision importable here
(examples/torchvision_ops.py); real users' torchvision needs nothing.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import dmlshim
from dmlshim import emulation, parity, patches

import gfpgan_models  # examples/, on sys.path via conftest.py; no third-party import at its top

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PHOTO = EXAMPLES / "data" / "astronaut.jpg"

# torch-directml's own normal_ kernel (0.2.5: native, failure_modes.md #33/#39) draws
# from the device's random stream, seeded from the CPU generator (#35): same seed,
# different numbers than the CPU. Emulated here as a stream seeded from the CPU
# default generator; the other rule is the missing kernel of older builds (#39).
def _directml_stream_normal_(self, mean=0.0, std=1.0, *, generator=None):
    seed = int(torch.randint(0, 2**62, ()))
    values = torch.empty(self.shape, dtype=self.dtype).normal_(
        mean, std, generator=torch.Generator().manual_seed(seed))
    return self.copy_(values)


NORMAL_RULES = {
    "own_stream": emulation.Rule("normal_", replace=_directml_stream_normal_,
                                 source="failure_modes.md #35 (device RNG seeded from the CPU)"),
    "no_kernel": emulation.Rule("normal_", error=NotImplementedError,
                                message="Could not run 'aten::normal_' with arguments from the 'DML' backend.",
                                source="failure_modes.md #39"),
}
OUT_OF_MEMORY = emulation.Rule(
    "convolution_overrideable", message="Could not allocate tensor with 134217728 bytes. "
    "There is not enough GPU video memory available!", source="failure_modes.md #26")


@pytest.fixture(scope="session")
def profile():
    """"device", the emulated device included: GFPGANv1Clean upsamples with bilinear
    ``F.interpolate``, which dmlshim computes on the device with other kernels than the
    CPU's (failure_modes.md #21, docs/defects.md "Upsampling"), rounding differently."""
    return "device"


@pytest.fixture(scope="session")
def gfpgan_lib():
    """``gfpgan`` imported (basicsr needs dmlshim active at its first import)."""
    was_active = dmlshim.is_active()
    dmlshim.activate()
    import gfpgan
    if not was_active:
        dmlshim.deactivate()
    return gfpgan


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory):
    """A ``DMLSHIM_CACHE`` folder: the models go to ``<root>/gfpgan``, as by default."""
    return tmp_path_factory.mktemp("dmlshim_cache")


@pytest.fixture(scope="session")
def model_files(cache_root, gfpgan_lib):
    return gfpgan_models.build(cache_root / "gfpgan")


def small_gfpgan(seed=0):
    """GFPGANv1Clean at out_size 64 (3M parameters): same code paths as the 512 model."""
    from gfpgan.archs.gfpganv1_clean_arch import GFPGANv1Clean

    torch.manual_seed(seed)
    net = GFPGANv1Clean(out_size=64, num_style_feat=64, channel_multiplier=1, decoder_load_path=None,
                        fix_decoder=False, num_mlp=2, input_is_latent=True, different_w=True,
                        narrow=0.25, sft_half=True).eval()
    return gfpgan_models.strengthen_noise(net)


def forward(model, x, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        image, rgbs = model(x, return_rgb=True)
    return [t.cpu() for t in (image, *rgbs)]


def forward_both(dml_device, seed=1):
    """(device outputs, CPU outputs) of the same small model, input and seed."""
    cpu = small_gfpgan()
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    reference = forward(cpu, x, seed)
    device = small_gfpgan().to(dml_device)
    return forward(device, x.to(dml_device), seed), reference


# ------------------------------------------------------------------ the model itself

def noise_calls():
    return sum(r["calls"] for r in dmlshim.report().rows if r["op"] == "StyleConv.noise")


def test_seeded_forward_equals_cpu(dml_device, gfpgan_lib, default_shim, assert_parity, profile):
    before = noise_calls()
    device_out, cpu_out = forward_both(dml_device)
    assert_parity(device_out, cpu_out, profile=profile)
    assert noise_calls() - before == 9          # out_size 64: 1 + 2 * (log2(64) - 2) StyleConvs


@pytest.mark.emulated_only(
    reason="injects emulation.Rules that make aten::normal_ fail or draw other numbers")
@pytest.mark.parametrize("rule", sorted(NORMAL_RULES))
def test_noise_comes_from_the_cpu_generator(dml_device, gfpgan_lib, rule, assert_parity, assert_differs,
                                           profile):
    """Without the shim DirectML's normal_ breaks seeded parity; with it, exact."""
    with emulation.configured(rules=[NORMAL_RULES[rule]], extend=True):
        dmlshim.deactivate()
        if rule == "no_kernel":
            with pytest.raises(NotImplementedError, match="aten::normal_"):
                forward_both(dml_device)
        else:
            device_out, cpu_out = forward_both(dml_device)
            assert_differs(device_out[0], cpu_out[0])
        dmlshim.activate()
        try:
            device_out, cpu_out = forward_both(dml_device)
        finally:
            dmlshim.deactivate()
    assert_parity(device_out, cpu_out, profile=profile)


def test_noise_size_matches_styleconv(gfpgan_lib):
    """The noise the shim makes has the shape StyleConv's own new_empty() would get."""
    from gfpgan.archs import stylegan2_bilinear_arch, stylegan2_clean_arch
    from dmlshim.integrations.gfpgan import noise_size

    for arch in (stylegan2_clean_arch, stylegan2_bilinear_arch):
        for mode in ("upsample", None, "downsample"):
            conv = arch.StyleConv(4, 4, 3, num_style_feat=8, sample_mode=mode).modulated_conv
            x = torch.randn(2, 4, 7, 9)
            out = conv(x, torch.randn(2, 8))
            assert noise_size(conv, x) == tuple(out.shape[-2:]), (arch.__name__, mode)


# ------------------------------------------------------------------ inference_mode (#41)

def _forward_in_inference_mode(model, x):
    torch.manual_seed(1)
    with torch.inference_mode():
        image, rgbs = model(x, return_rgb=True)
    return [t.cpu() for t in (image, *rgbs)]


def test_inference_mode_fails_without_the_shim(dml_device, gfpgan_lib):
    """sdnext#3464's face restore: a model moved to DirectML, called inside
    inference_mode: 'Cannot set version_counter for inference tensor' (DirectML#602)."""
    model = small_gfpgan().to(dml_device)
    with pytest.raises(RuntimeError, match="Cannot set version_counter for inference tensor"):
        _forward_in_inference_mode(model, torch.randn(1, 3, 64, 64).to(dml_device))


def test_inference_mode_forward_equals_cpu(dml_device, gfpgan_lib, default_shim, assert_parity, profile):
    """With dmlshim, inside inference_mode it runs on the device (no CPU retry of a failed
    call) and equals the CPU."""
    from dmlshim.patches import auto

    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    ref = _forward_in_inference_mode(small_gfpgan(), x)
    got = _forward_in_inference_mode(small_gfpgan().to(dml_device), x.to(dml_device))
    assert_parity(got, ref, profile=profile)
    assert "version_counter" not in str(auto.failures())


# ------------------------------------------------------------------ the whole pipeline

@pytest.fixture(scope="module")
def restorers(model_files, dml_device):
    """(device GFPGANer, CPU GFPGANer) from the same random-weight files."""
    return gfpgan_models.restorer(model_files, dml_device), gfpgan_models.restorer(model_files, "cpu")


def enhance(restorer, image, seed=0, **kwargs):
    torch.manual_seed(seed)
    return restorer.enhance(image, **kwargs)


@pytest.fixture
def realesrgan_background(restorers, dml_device, tmp_path):
    """Both restorers with inference_gfpgan.py's Real-ESRGAN x2 background (small, untiled)."""
    for restorer, device in zip(restorers, (dml_device, "cpu")):
        restorer.bg_upsampler = gfpgan_models.background_upsampler(device, half=False, folder=tmp_path, tile=0)
    yield [r.bg_upsampler for r in restorers]
    for restorer in restorers:
        restorer.bg_upsampler = None


def test_enhance_detect_align_restore_paste_equals_cpu(restorers, realesrgan_background, dml_device,
                                                       default_shim, profile, assert_parity, assert_differs):
    """The whole pipeline with the Real-ESRGAN background, on an odd-width image (x2 pads
    it with reflect: failure_modes.md #42), inside torch.inference_mode() (#41)."""
    import cv2

    image = cv2.imread(str(PHOTO))[:, 1:].copy()                  # 512 x 511
    device_restorer, cpu_restorer = restorers
    for model in (device_restorer.gfpgan, device_restorer.face_helper.face_det,
                  device_restorer.face_helper.face_parse):
        assert next(model.parameters()).device.type == dml_device.type
    with torch.inference_mode():
        cropped, restored, pasted = enhance(device_restorer, image)
        cpu_cropped, cpu_restored, cpu_pasted = enhance(cpu_restorer, image)

    assert [bg.mod_pad_w for bg in realesrgan_background] == [1, 1]   # the odd width was padded
    assert len(cropped) == len(cpu_cropped) == 1                 # the detector found the face
    assert cropped[0].shape == (512, 512, 3) and pasted.shape == cpu_pasted.shape
    assert_differs(restored[0], cropped[0])                     # restoration ran (not swallowed)
    for a, b in [*zip(cropped, cpu_cropped), *zip(restored, cpu_restored), (pasted, cpu_pasted)]:
        figures = parity.compare_images(a, b)
        assert figures.within(profile), figures
    assert_parity(np.asarray(device_restorer.face_helper.all_landmarks_5),
                  np.asarray(cpu_restorer.face_helper.all_landmarks_5))


@pytest.mark.emulated_only(
    reason="injects an out-of-memory emulation.Rule, which the real device cannot be made to raise")
def test_swallowed_error_is_logged(restorers, caplog, assert_same):
    """GFPGANer.enhance hides a failed forward; with dmlshim it is logged on ``dmlshim``."""
    import cv2

    face = cv2.resize(cv2.imread(str(PHOTO)), (512, 512))
    device_restorer, _ = restorers
    with emulation.configured(rules=[OUT_OF_MEMORY], extend=True):
        dmlshim.deactivate()
        with caplog.at_level("ERROR", logger="dmlshim"):
            _, restored, _ = enhance(device_restorer, face, has_aligned=True)
        assert not caplog.records                                  # silent without the shim
        assert_same(restored[0], face)                          # ... and the face unrestored

        dmlshim.activate()
        try:
            with caplog.at_level("ERROR", logger="dmlshim"):
                enhance(device_restorer, face, has_aligned=True)
        finally:
            dmlshim.deactivate()
    [record] = [r for r in caplog.records if r.name == "dmlshim"]
    assert "GFPGANer.enhance" in record.getMessage()
    assert "not enough GPU video memory" in record.getMessage()
    assert record.exc_info is not None                            # with the traceback


def test_example_compare_cpu_reports_parity(model_files, cache_root, tmp_path, monkeypatch, capsys, device_kind,
                                            profile, assert_same):
    """examples/gfpgan_restore.py end to end (aligned input: no detection, so it stays quick)."""
    import cv2
    import gfpgan_restore

    monkeypatch.setenv("DMLSHIM_CACHE", str(cache_root))       # reuse model_files
    face = tmp_path / "face.png"
    cv2.imwrite(str(face), cv2.resize(cv2.imread(str(PHOTO)), (512, 512)))
    try:
        status = gfpgan_restore.main([str(face), "-o", str(tmp_path / "out"), "--device", device_kind,
                                      "--aligned", "--compare-cpu", "--seed", "3"])
    finally:
        dmlshim.deactivate()
    out = capsys.readouterr().out
    assert status == 0, out
    assert "weights: RANDOM" in out and f"within the '{profile}' profile" in out
    if profile == "exact":
        assert "face.png: vs CPU: max pixel difference 0, PSNR inf dB" in out
    restored = cv2.imread(str(tmp_path / "out" / "face_restored.png"))
    pair = cv2.imread(str(tmp_path / "out" / "face_before_after.png"))
    assert restored.shape == (512, 512, 3) and pair.shape == (512, 1024, 3)
    assert_same(pair[:, 512:], restored)


# ------------------------------------------------------------------ device defaults

def test_facexlib_default_device(model_files, monkeypatch):
    """init_parsing_model's default is device='cuda'; with dmlshim it is select_device()."""
    import facexlib.detection.retinaface as retinaface
    import facexlib.parsing as parsing      # looked up at call time: the patch wraps it there

    weights = str(model_files / "gfpgan" / "weights")
    dmlshim.deactivate()
    if not torch.cuda.is_available():
        # CPU torch: "Torch not compiled with CUDA enabled"; a CUDA build on a machine
        # without a GPU (the torch 2.4.1 lane here): "Found no NVIDIA driver".
        with pytest.raises((AssertionError, RuntimeError), match="CUDA|NVIDIA driver"):
            parsing.init_parsing_model("parsenet", model_rootpath=weights)
    # facexlib 0.2.5 keeps a module-level device (detection/retinaface.py:14)
    cuda = torch.device("cuda")
    monkeypatch.setattr(retinaface, "device", cuda, raising=False)
    dmlshim.activate()
    try:
        model = parsing.init_parsing_model("parsenet", model_rootpath=weights)
        assert next(model.parameters()).device == dmlshim.select_device()
        assert retinaface.device == dmlshim.select_device()
    finally:
        dmlshim.deactivate()
    assert retinaface.device is cuda


def test_device_defaults_follow_select_device(model_files, dml_device, monkeypatch):
    """Constructors called without ``device`` land on ``dmlshim.select_device()``.

    select_device() knows real DirectML only, so it is pointed at the emulated device here.
    """
    import facexlib.detection.retinaface as retinaface
    import facexlib.utils.face_restoration_helper as helper_module

    def device_of(module):
        return next(module.parameters()).device.type

    monkeypatch.setattr(dmlshim.devices, "select_device", lambda request=None: dml_device)
    dmlshim.deactivate()
    assert device_of(retinaface.RetinaFace(network_name="mobile0.25")) == "cpu"
    dmlshim.activate()
    try:
        detector = retinaface.RetinaFace(network_name="mobile0.25")
        helper = helper_module.FaceRestoreHelper(1, use_parse=True,
                                                 model_rootpath=str(model_files / "gfpgan" / "weights"))
        restorer = gfpgan_models.restorer(model_files, None)        # GFPGANer(device=None)
    finally:
        dmlshim.deactivate()
    assert detector.mean_tensor.device.type == dml_device.type
    models = (detector, helper.face_det, helper.face_parse, restorer.gfpgan,
              restorer.face_helper.face_det, restorer.face_helper.face_parse)
    assert [device_of(m) for m in models] == [dml_device.type] * len(models)


# ------------------------------------------------------------------ import order

IMPORT_ORDER_SCRIPT = r"""
import json, sys
sys.path.insert(0, {examples!r})
import torchvision_ops
torchvision_ops.apply()       # this machine's CUDA-only torchvision; imports nothing
for step in {steps!r}:
    if step == "dmlshim":
        import dmlshim
        if {real!r}:
            import torch_directml     # the real device (make test-realdml)
        else:
            from dmlshim import emulation
            emulation.install()   # a DirectML device: with none, activate() installs no fix
        dmlshim.activate()
    else:
        __import__(step)
import gfpgan, facexlib, basicsr, dmlshim
from dmlshim import patches
from dmlshim.integrations import facexlib as fx_patch, gfpgan as gf_patch

def owner(module, attr):
    obj = sys.modules[module]
    *path, name = attr.split(".")
    for part in path:
        obj = getattr(obj, part)
    return obj, name

targets = [*fx_patch._DEFAULTS, ("gfpgan.utils", "GFPGANer.__init__"),
           *((m, "StyleConv.forward") for m in gf_patch._STYLECONV)]
def wrapped():
    return [getattr(*owner(*t)) is not patches.original(*owner(*t)) for t in targets]

active = dict(installed=sorted(patches.installed()), wrapped=wrapped(),
              alias="torchvision.transforms.functional_tensor" in sys.modules,
              print="print" in vars(gfpgan.utils))
dmlshim.deactivate()
after = dict(installed=patches.installed(), wrapped=wrapped(),
             alias="torchvision.transforms.functional_tensor" in sys.modules,
             print="print" in vars(gfpgan.utils))
print(json.dumps(dict(active=active, after=after)))
"""


ORDERS = [
    ["dmlshim", "torch", "torchvision", "facexlib", "basicsr"],
    ["torch", "torchvision", "facexlib", "dmlshim", "basicsr"],
    ["facexlib", "dmlshim", "basicsr", "torchvision", "torch"],
    ["torchvision", "dmlshim", "basicsr", "facexlib"],
    ["dmlshim", "basicsr", "facexlib", "torch"],
]
BASICSR_FIRST = ["torch", "basicsr", "dmlshim"]


@pytest.fixture(scope="module")
def import_runs():
    """``{order: (returncode, stdout, stderr)}``: one fresh Python per order, all started
    at once (each spends ~5 s importing the gfpgan stack)."""
    runs = {}
    for steps in (*ORDERS, BASICSR_FIRST):
        script = IMPORT_ORDER_SCRIPT.format(examples=str(EXAMPLES), steps=steps,
                                            real=os.environ.get("DMLSHIM_TEST_DEVICE", "").lower() == "directml")
        runs[tuple(steps)] = subprocess.Popen([sys.executable, "-c", script], text=True,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    results = {}
    for steps, process in runs.items():
        stdout, stderr = process.communicate(timeout=600)
        results[steps] = (process.returncode, stdout, stderr)
    return results


@pytest.mark.parametrize("steps", ORDERS, ids="-".join)
def test_import_order_does_not_matter_and_deactivate_restores(import_runs, steps):
    returncode, stdout, stderr = import_runs[tuple(steps)]
    assert returncode == 0, stderr[-3000:]
    state = json.loads(stdout.strip().splitlines()[-1])
    active, after = state["active"], state["after"]
    assert {"basicsr", "facexlib", "gfpgan"} <= set(active["installed"])
    assert all(active["wrapped"]) and active["alias"] and active["print"]
    assert after == {"installed": [], "wrapped": [False] * len(active["wrapped"]),
                     "alias": False, "print": False}


def test_basicsr_before_dmlshim_still_fails(import_runs):
    """The documented limit: basicsr dies inside its own import before any hook runs."""
    returncode, _, stderr = import_runs[tuple(BASICSR_FIRST)]
    assert returncode != 0
    assert "torchvision.transforms.functional_tensor" in stderr


# ------------------------------------------------------------------ test-environment helper

def _greedy_nms(boxes, scores, threshold):
    """torchvision's ops/cpu/nms_kernel.cpp, one float32 scalar at a time."""
    f32 = np.float32
    order = sorted(range(len(scores)), key=lambda i: -scores[i])       # stable, descending
    area = [f32(b[2] - b[0]) * f32(b[3] - b[1]) for b in boxes]
    suppressed, keep = set(), []
    for n, i in enumerate(order):
        if i in suppressed:
            continue
        keep.append(i)
        for j in order[n + 1:]:
            w = max(f32(0), min(boxes[i][2], boxes[j][2]) - max(boxes[i][0], boxes[j][0]))
            h = max(f32(0), min(boxes[i][3], boxes[j][3]) - max(boxes[i][1], boxes[j][1]))
            inter = f32(w * h)
            if float(inter / (area[i] + area[j] - inter)) > threshold:   # float vs double
                suppressed.add(j)
    return keep


def test_torchvision_ops_nms_stand_in():
    """examples/torchvision_ops.py's nms keeps what torchvision's CPU kernel keeps."""
    from hypothesis import example, given, settings, strategies as st
    import torchvision_ops

    corner = st.integers(0, 40)
    box = st.tuples(corner, corner, st.integers(1, 30), st.integers(1, 30)).map(
        lambda b: (b[0], b[1], b[0] + b[2], b[1] + b[3]))

    @settings(max_examples=60, deadline=None)
    @example([((0, 0, 10, 10), 5), ((0, 0, 3, 10), 2)], 0.3)    # IoU == float32(0.3) > 0.3
    @given(st.lists(st.tuples(box, st.integers(0, 5)), max_size=12), st.sampled_from([0.0, 0.3, 0.5, 0.9]))
    def check(items, threshold):
        boxes = np.array([b for b, _ in items], dtype=np.float32).reshape(-1, 4)
        scores = np.array([s / 5 for _, s in items], dtype=np.float32)  # ties on purpose
        kept = torchvision_ops.nms(torch.from_numpy(boxes), torch.from_numpy(scores), threshold)
        assert kept.dtype == torch.int64
        assert kept.tolist() == _greedy_nms(boxes, scores, threshold)

    check()
