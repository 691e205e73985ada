"""Build a small Cython module for a benchmark (a floor function, a nogil caller) on first use.

The module is compiled once into bench/.native-build/ against the installed fuel_kernel headers
and imported from there; later runs reuse it while the .pyx is unchanged.
"""
import hashlib
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, ".native-build")


def load(pyx_name):
    """Import bench/<pyx_name>.pyx, compiling it first if needed."""
    import numpy
    import fuel_kernel

    source = os.path.join(HERE, pyx_name + ".pyx")
    # the build depends on the .pyx and on the fuel_kernel it compiles against (its header and
    # cimport API): a change to either rebuilds
    digest = hashlib.sha1(fuel_kernel.__file__.encode())
    package = os.path.dirname(os.path.abspath(fuel_kernel.__file__))
    for path in (source, os.path.join(fuel_kernel.get_include(), "fuel_kernel", "abi.h"),
                 os.path.join(fuel_kernel.get_include(), "fuel_kernel", "abi_enums.h"),
                 os.path.join(package, "abi.pxd"), os.path.join(package, "abi_enums.pxi")):
        with open(path, "rb") as handle:
            digest.update(handle.read())
    digest = digest.hexdigest()[:12]
    module_name = f"{pyx_name}_{digest}"
    out_dir = os.path.join(BUILD, module_name)
    found = [f for f in os.listdir(out_dir) if f.startswith(module_name) and f.endswith(".so")] \
        if os.path.isdir(out_dir) else []
    if not found:
        from Cython.Build import cythonize
        from setuptools import Distribution, Extension
        os.makedirs(out_dir, exist_ok=True)
        pyx_copy = os.path.join(out_dir, module_name + ".pyx")
        with open(source) as src, open(pyx_copy, "w") as dst:
            dst.write(src.read())
        ext = Extension(module_name, [pyx_copy],
                        include_dirs=[fuel_kernel.get_include(), numpy.get_include()],
                        extra_compile_args=["-O3"])
        dist = Distribution({"ext_modules": cythonize([ext], quiet=True,
                                                      include_path=[os.path.dirname(os.path.dirname(fuel_kernel.__file__))],
                                                      compiler_directives={"language_level": 3})})
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib = out_dir
        cmd.build_temp = os.path.join(out_dir, "tmp")
        cmd.ensure_finalized()
        cmd.run()
        found = [f for f in os.listdir(out_dir) if f.startswith(module_name) and f.endswith(".so")]
    spec = importlib.util.spec_from_file_location(module_name, os.path.join(out_dir, found[0]))
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
