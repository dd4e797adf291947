"""Builds torch-tpu: the C library (src/, no PyTorch) as a static library,
then the thin C++ glue (csrc/) into torch_tpu._C, linked against it.

Install with `pip install --no-build-isolation .` so the build uses the
installed torch==2.13.0 (the extension is tied to that PyTorch ABI)."""
import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
C_SOURCES = sorted(glob.glob("src/runtime/*.c") + glob.glob("src/kernels/*.c") + glob.glob("src/fuse/*.c"))
CXX_SOURCES = sorted(glob.glob("csrc/**/*.cpp", recursive=True))
# -fno-math-errno: nothing reads errno, and without it sqrtf cannot be one
# instruction in a vectorised loop (the bits are IEEE's either way).
C_FLAGS = ["-std=c11", "-O3", "-Wall", "-Wextra", "-Werror", "-fno-math-errno", "-fvisibility=hidden", "-pthread"]

setup(
    libraries=[
        (
            "tpu_c",
            {
                "sources": C_SOURCES,
                "include_dirs": [os.path.join(ROOT, "src/include")],
                "cflags": C_FLAGS,
            },
        )
    ],
    ext_modules=[
        CppExtension(
            name="torch_tpu._C",
            sources=CXX_SOURCES,
            include_dirs=[os.path.join(ROOT, "src/include"), os.path.join(ROOT, "csrc")],
            libraries=["tpu_c"],
            extra_compile_args={"cxx": ["-O2", "-Wall", "-Wno-unused-parameter"]},
            extra_link_args=["-pthread"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
