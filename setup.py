"""The one compiled part of joinlib: the Bloom filter kernels (joinlib/protocol/_bloomc.c).

``optional``: without a C compiler the install still succeeds, and joinlib.protocol.bloom keeps its numpy form
(same answers, slower); ``python -c "import joinlib.protocol._bloomc"`` says whether the kernels are built.
Everything else about the package is in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("joinlib.protocol._bloomc", ["joinlib/protocol/_bloomc.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall"])])
