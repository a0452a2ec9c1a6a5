"""What the real torch-directml 0.2.5 binary does: the laws the fixes (``dmlshim.patches``)
decide by and the emulator (``dmlshim.emulation``) reproduces, stated once (issue 40).

A law says which calls DirectML gets wrong and what it computes there, never how a fix
computes the right answer (that stays in ``patches/``).  Each names its source: the
defect's row (docs/defects.md), failure_modes.md or the issue where it was measured.
This package imports neither ``patches`` nor ``emulation`` (tests/test_import_cycles.py),
so a wrong law shows up as the real binary disagreeing with the emulator, not hidden by
the fix and the emulator agreeing with each other.  torch-directml's registrations (its
op routing, its view kernels) are ``dmlshim.dml_ops``, beside this package.

- ``integers``: integer math through float32 and int64 by 32 bits (``int_range``),
  ``arange``'s length, ``pow`` of 0, ``addmm``'s scalars, bool exponents, ``unique`` of bytes;
- ``broadcast``: ``copy_`` of a broadcasting source, binary ops of operands of two ranks,
  ``masked_fill_``'s ranks;
- ``pooling``: ``adaptive_avg_pool``'s window grid, ``avg_pool``'s last ceil-mode window,
  ``max_pool2d`` of an unbatched input;
- ``nan``: NaN in the max/min reductions, ``argmax``, ``logsumexp``, the inf-norms;
- ``norms``: ``linalg_vector_norm``/``norm``'s overwritten input, ``_cdist_forward``'s ranks and
  empty batches;
- ``empty``: unary ops of an input with no elements, binary ops with an operand of none.
"""
