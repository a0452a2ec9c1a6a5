"""Start-up hook for child processes in this repo's CI (funasr-server with Fun-ASR-Nano):
torchvision stand-ins before transformers imports torchvision (see ../torchvision_ops.py;
a no-op where torchvision's own library loads). Put this folder on PYTHONPATH."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torchvision_ops  # noqa: E402

torchvision_ops.apply()
