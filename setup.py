"""The one compiled piece: the linearizability search's inner loop (``invariants/_wgl.py``), built
with Cython when a C compiler is there.  The build is optional: without a compiler the same file
runs as plain Python and gives the same verdicts, only slower."""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # no Cython at build time: the pure-Python search
    extensions = []
else:
    extensions = cythonize(
        [Extension("invariants._wgl", ["invariants/_wgl.py"], optional=True)],
        compiler_directives={"language_level": "3"},
        quiet=True,
    )

setup(ext_modules=extensions)
