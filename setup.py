"""The compiled parts of joinlib: the Bloom filter kernels (joinlib/protocol/_bloomc.c), a join
key's digest (joinlib/protocol/_digestc.c), the Avro size kernel
(joinlib/protocol/_avroc.c), DJA's Fenwick tree (joinlib/runtime/algorithms/_fenwickc.c), a reducer's key tables
(joinlib/runtime/algorithms/_keytablec.c) and pending tuples (joinlib/runtime/algorithms/_reducerc.c), the rows a
step hands to the next (joinlib/runtime/_rowsc.c) and the live decoder's flat JSON records (joinlib/ingest/_jsonc.c).

``optional``: without a C compiler the install still succeeds, and the modules that use them keep their Python
or numpy forms (same answers, slower); ``python -c "import joinlib.protocol._bloomc"`` says whether the kernels
are built.  Everything else about the package is in pyproject.toml."""
from setuptools import Extension, setup

KERNELS = {"joinlib.protocol._bloomc": "joinlib/protocol/_bloomc.c",
           "joinlib.protocol._digestc": "joinlib/protocol/_digestc.c",
           "joinlib.protocol._avroc": "joinlib/protocol/_avroc.c",
           "joinlib.runtime.algorithms._fenwickc": "joinlib/runtime/algorithms/_fenwickc.c",
           "joinlib.runtime.algorithms._keytablec": "joinlib/runtime/algorithms/_keytablec.c",
           "joinlib.runtime.algorithms._reducerc": "joinlib/runtime/algorithms/_reducerc.c",
           "joinlib.runtime._rowsc": "joinlib/runtime/_rowsc.c",
           "joinlib.runtime._lanesc": "joinlib/runtime/_lanesc.c",
           "joinlib.ingest._jsonc": "joinlib/ingest/_jsonc.c",
           "joinlib.state._storec": "joinlib/state/_storec.c"}

# the headers a kernel includes: build_ext rebuilds it when one changes, and setuptools >= 69 puts them in an sdist
# (MANIFEST.in does for older ones)
DEPENDS = {"joinlib.runtime.algorithms._keytablec": ["joinlib/runtime/algorithms/_pyattr.h"],
           "joinlib.runtime.algorithms._reducerc": ["joinlib/runtime/algorithms/_pyattr.h"]}

setup(ext_modules=[Extension(name, [src], depends=DEPENDS.get(name, []), optional=True,
                             extra_compile_args=["-O2", "-Wall"])
                   for name, src in KERNELS.items()])
