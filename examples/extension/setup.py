"""Build the fk_example extension against the installed fuel_kernel:

    python setup.py build_ext --inplace

Two things point the build at fuel_kernel: fuel_kernel.get_include() for the C header
(fuel_kernel/abi.h), and the folder that holds the fuel_kernel package for Cython's
`cimport fuel_kernel.abi` (abi.pxd ships inside the package).
"""
import os

import fuel_kernel
from Cython.Build import cythonize
from setuptools import Extension, setup

package_parent = os.path.dirname(os.path.dirname(os.path.abspath(fuel_kernel.__file__)))

extension = Extension(
    "fk_example",
    ["fk_example.pyx"],
    include_dirs=[fuel_kernel.get_include()],
    extra_compile_args=["-O2"],
)

setup(
    name="fk_example",
    version="0.1.0",
    install_requires=["fuel_kernel", "numpy>=2"],
    ext_modules=cythonize([extension], include_path=[package_parent],
                          compiler_directives={"language_level": 3}, quiet=True),
)
