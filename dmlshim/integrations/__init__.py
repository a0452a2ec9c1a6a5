"""Patches for third-party libraries: one module per library (funasr, gfpgan, basicsr,
facexlib), each installed lazily when its library is first imported (``Patch.imports``).

They fix what is not an aten call: a library's own device defaults, generators and
swallowed errors.  Their aten calls are the fixes' in ``dmlshim/patches/``; the registry
(``dmlshim.patches``) imports and installs both folders' modules alike.
"""
