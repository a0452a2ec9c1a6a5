"""The wheel's tags: a platform wheel where ``dmlshim/_prebuilt`` holds a compiled gate
(``make wheel-check`` puts one there: ``dmlshim.cpp_build.prebuild``), else pure Python.
Everything else is in pyproject.toml."""
import glob
import os

from setuptools import setup
from setuptools.dist import Distribution

PREBUILT = glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "dmlshim", "_prebuilt", "*.*"))


class _Distribution(Distribution):
    def has_ext_modules(self):
        return bool(PREBUILT)       # a binary inside: tagged for this Python and platform


setup(distclass=_Distribution)
