"""The real torch-directml 0.2.5 binary on Linux, with no GPU: ``python -m dmlshim realdml``.

torch-directml's Linux wheel (built for WSL) runs unmodified on a plain Linux machine once it
is given a Direct3D 12 and a DXCore::

    torch_directml_native + libdirectml.so       (the wheel, unmodified)
      -> libd3d12.so   forwarder (symbol version VER_1) -> vkd3d-proton 2.14 (native build, patched)
      -> libdxcore.so  stand-in with one adapter
      -> Vulkan loader -> Mesa 25 lavapipe (a CPU Vulkan driver) or any other Vulkan driver

``sources`` finds and checks the inputs, ``build.build()`` builds the stack once into the user cache,
``stack`` gives the environment a process runs under, and ``cli`` is the command line. The
facts behind each step are in ``../shared/realdml/README.md`` and ``docs/realdml.md``.
"""
from .sources import SourceError
from .build import BuildError, MissingTool
from .stack import NoBuild, Stack, current

__all__ = ["current", "Stack", "SourceError", "BuildError", "MissingTool", "NoBuild"]
