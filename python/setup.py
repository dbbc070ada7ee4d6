"""Builds tenferro._tenferro, the CPython extension over libtenferro-client.

The extension links the repository's static client library (build/libtenferro-client.a)
and protobuf-c, and uses the stable ABI (Py_LIMITED_API 3.11: one build for CPython 3.11+).

Where things are found:
  TENFERRO_BUILD     the build folder holding libtenferro-client.a (default: ../build);
                     when the library is missing there, `make -C .. build/libtenferro-client.a` runs.
  TENFERRO_INCLUDE   the folder holding tenferro/*.h (default: ../include).
The package's version is the C library's (include/tenferro/version.h).
"""
import os
import re
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
INCLUDE = os.environ.get("TENFERRO_INCLUDE") or os.path.join(REPO, "include")
BUILD = os.environ.get("TENFERRO_BUILD") or os.path.join(REPO, "build")
LIB = os.path.join(BUILD, "libtenferro-client.a")


def library_version():
    text = open(os.path.join(INCLUDE, "tenferro", "version.h")).read()
    parts = [re.search(r"#define TF_VERSION_%s (\d+)" % k, text).group(1)
             for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def ensure_library():
    if os.path.exists(LIB):
        return
    if os.environ.get("TENFERRO_BUILD"):
        raise SystemExit("tenferro: %s is missing (TENFERRO_BUILD=%s): build the C library first"
                         % (LIB, BUILD))
    print("tenferro: building the C client library (make build/libtenferro-client.a)")
    subprocess.check_call(["make", "-C", REPO, "build/libtenferro-client.a"])


def protobuf_c():
    """protobuf-c statically when its archive is there (no runtime dependency), else shared."""
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"):
        if os.path.exists(os.path.join(d, "libprotobuf-c.a")):
            return [os.path.join(d, "libprotobuf-c.a")], []
    return [], ["protobuf-c"]


ensure_library()
pb_objects, pb_libs = protobuf_c()
SOURCES = ["module.c", "client.c", "tensor.c", "ops.c", "linalg.c", "session.c", "pinned.c", "graph.c"]

ext = Extension(
    "tenferro._tenferro",
    sources=[os.path.join("src", "tenferro", s) for s in SOURCES],
    depends=[os.path.join("src", "tenferro", "_tenferro.h"), LIB],
    include_dirs=[INCLUDE],
    define_macros=[("Py_LIMITED_API", "0x030B0000"), ("_GNU_SOURCE", None)],
    extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type",
                        "-fvisibility=hidden"],
    extra_objects=[LIB] + pb_objects,
    libraries=pb_libs + ["pthread"],
    extra_link_args=["-Wl,--exclude-libs,ALL"],
    py_limited_api=True,
)

setup(
    version=library_version(),
    ext_modules=[ext],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
