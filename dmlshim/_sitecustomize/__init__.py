"""The bootstrap folder ``dmlshim run`` puts first on ``PYTHONPATH``.

Python imports ``sitecustomize`` at start-up (the ``site`` module), so the
``sitecustomize.py`` beside this file runs in every Python process started under
``dmlshim run``, before the program's first line.  This ``__init__`` only makes
the folder part of the installed package; nothing imports it.
"""
