"""The CPU code paths of ``runtime.cpu_paths: portable``: vendor-exact bits, for audits.

``native`` (the default) leaves every library on the CPU's own fastest paths; nothing here runs.
``portable`` pins the paths so that any x86 CPU with AVX2 and FMA (Intel or AMD, since 2013)
writes the same bits. MKL, torch's own kernels (ATen), oneDNN (torch's GELU) and OpenBLAS (numpy,
scipy, scikit-learn) each pick their kernels from the CPU's instruction set when they first run, and
each kernel rounds its sums in its own order; :func:`pinned_environment` names the variables that
pin all four, and ``stages.runtime.set_threads`` (every stage's entry) re-executes the stage with
them in its environment, since they act only before numpy and torch load:

* ``MKL_CBWR=COMPATIBLE``: MKL's one SSE2 branch without the approximation instructions that
  differ between vendors (the only branch MKL honours on non-Intel CPUs). Its gemm splits sums by
  thread, so ``runtime.threads`` matters too. The price: docs/performance.md.
* ``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2``, ``OPENBLAS_CORETYPE=Haswell``: torch's
  vector kernels, oneDNN's JIT kernels and OpenBLAS's kernels at AVX2.
* ``NPY_DISABLE_CPU_FEATURES``: numpy's own SIMD loops no higher than AVX2 (x86-64-v3); numpy's
  float64 ``exp``/``log`` give other bits on the AVX-512 loops.

Torch also sends float ``sqrt``, ``exp``, ``log``, ``erf``, ``tanh``, ... on contiguous tensors to
MKL's vector-math library (VML), whose kernels differ by vendor under every branch, and which
resolves each kernel lazily on its first call (racy across threads: pytorch/pytorch#188792). In
portable mode :func:`warm_vector_math` makes those first calls on one thread, and no stage sends its
data there: the GPT's GELU and loss take their second derivatives without ``exp``
(stages/models/vendor_neutral_ops.py, chosen by ``GPT(cfg, portable_ops=True)``), RankMe's entropy
is a product of powers (``stages.measures.rankme``, ``portable=True``), the optimisers run fused and
the GPT-NeoX rotary tables come from numpy (stages/pythia/rotary.py). ``tests/test_numerics.py``
checks each pin and that a portable training update calls no VML.

The run manifests record which paths were in effect (:func:`in_effect`) and the mode. Importing this
module changes nothing.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

from stages.errors import PipelineError

MODES = ("native", "portable")
MKL_BRANCH = "COMPATIBLE"
TORCH_CAPABILITY = "avx2"
ONEDNN_ISA = "AVX2"
OPENBLAS_CORE = "Haswell"
# numpy's dispatch targets above x86-64-v3, by numpy 2.4's names and by the older ones (unknown names are ignored)
NUMPY_DISABLED = ("X86_V4 AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL "
                  "AVX512_SPR AVX512_FP16")
VARIABLES = ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE",
             "NPY_DISABLE_CPU_FEATURES")  # what portable mode sets


def _cpuinfo_field(name: str, cpuinfo: Path) -> str | None:
    """The value of the first ``name`` line in ``cpuinfo`` (Linux), or None where unknown."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name):
            return line.partition(":")[2].strip()
    return None


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    """The instruction-set flags of the first CPU in ``cpuinfo`` (Linux), or None where unknown."""
    flags = _cpuinfo_field("flags", cpuinfo)
    return None if flags is None else set(flags.split())


def pinned_environment(machine: str | None = None, flags: set[str] | None = None) -> dict[str, str]:
    """The environment of portable mode on a CPU of architecture ``machine`` with ``flags`` (default:
    this one's); a :class:`PipelineError` naming ``runtime.cpu_paths`` where the CPU is not x86 with
    AVX2 and FMA (the pinned kernels would not run there)."""
    machine = platform.machine() if machine is None else machine
    flags = cpu_flags() if flags is None else flags
    if machine.lower() not in ("x86_64", "amd64") or not {"avx2", "fma"} <= set(flags or ()):
        raise PipelineError(f"runtime.cpu_paths: portable needs an x86 CPU with AVX2 and FMA, and this {machine} "
                            "CPU has not (set it to native)")
    return {"MKL_CBWR": MKL_BRANCH, "ATEN_CPU_CAPABILITY": TORCH_CAPABILITY, "ONEDNN_MAX_CPU_ISA": ONEDNN_ISA,
            "NPY_DISABLE_CPU_FEATURES": NUMPY_DISABLED, "OPENBLAS_CORETYPE": OPENBLAS_CORE}


def missing(pinned: dict[str, str], environ=None) -> dict[str, str]:
    """The entries of ``pinned`` that ``environ`` (default ``os.environ``) does not hold."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in pinned.items() if environ.get(k) != v}


def in_effect() -> dict:
    """The code paths this process computes with: torch's CPU capability, torch's BLAS, the MKL
    branch asked for, and the OpenBLAS kernels numpy and scipy loaded. Recorded in run manifests."""
    import torch
    from threadpoolctl import threadpool_info

    openblas = sorted({i.get("architecture") or "?" for i in threadpool_info() if i["internal_api"] == "openblas"})
    return {"torch_cpu": torch.backends.cpu.get_cpu_capability(),
            "torch_blas": "mkl" if torch.backends.mkl.is_available() else "other",
            "mkl_cbwr": os.environ.get("MKL_CBWR", "AUTO"),
            "onednn_max_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL"),
            "openblas": openblas,
            "numpy_simd": numpy_simd()}


def numpy_simd() -> list[str]:
    """numpy's dispatch targets that are in use in this process (``numpy.show_runtime`` lists them)."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # numpy 1.x
        from numpy.core import _multiarray_umath as umath
    return [name for name in umath.__cpu_dispatch__ if umath.__cpu_features__.get(name)]


def mismatches(effect: dict, pinned: dict[str, str]) -> list[str]:
    """Where the code paths in ``effect`` (:func:`in_effect`) differ from ``pinned``
    (:func:`pinned_environment`): one phrase each, empty when the run computes on the pinned paths.
    Where ``pinned`` is empty (native mode) nothing is expected."""
    if not pinned:
        return []
    found = []
    if effect["torch_cpu"].lower() != TORCH_CAPABILITY:
        found.append(f"torch computes on {effect['torch_cpu']}, not {TORCH_CAPABILITY.upper()}")
    if effect["torch_blas"] == "mkl" and effect["mkl_cbwr"] != MKL_BRANCH:
        found.append(f"MKL on branch {effect['mkl_cbwr']}, not {MKL_BRANCH}")
    if effect["onednn_max_isa"] != ONEDNN_ISA:
        found.append(f"oneDNN up to {effect['onednn_max_isa']}, not {ONEDNN_ISA}")
    if effect["torch_blas"] != "mkl":
        found.append("torch's BLAS is not MKL")
    if any(arch != OPENBLAS_CORE for arch in effect["openblas"]):
        found.append(f"OpenBLAS on {', '.join(effect['openblas'])}, not {OPENBLAS_CORE} "
                     "(OPENBLAS_CORETYPE set after numpy loaded)")
    above = [name for name in effect["numpy_simd"] if name in NUMPY_DISABLED.split()]
    if above:
        found.append(f"numpy's SIMD loops on {', '.join(above)} (NPY_DISABLE_CPU_FEATURES set after numpy loaded)")
    return found


# torch's CPU kernels that call MKL's vector-math library (VML) on contiguous float tensors: the
# IMPLEMENT_VML_MKL list of aten/src/ATen/cpu/vml.h, by their torch names.
VML_FUNCTIONS = ("acos", "asin", "atan", "cos", "erf", "erfc", "erfinv", "exp", "log", "log10", "log2",
                 "sin", "sqrt", "tan", "tanh", "trunc")


def warm_vector_math() -> list[str]:
    """Make the first call of every VML function torch uses, in float32 and float64, on one element
    (so on the calling thread alone), and return the names called.

    MKL resolves a VML function's kernel on its first call; when that call comes from several
    intra-op threads at once, one of them can run a low-accuracy kernel for its chunk
    (pytorch/pytorch#188792). After this, every later call finds its kernel resolved. Values are
    computed and thrown away; nothing else in the process changes."""
    import torch

    for dtype in (torch.float32, torch.float64):
        one = torch.full((1,), 0.5, dtype=dtype)  # inside every function's domain (acos, erfinv, log)
        for name in VML_FUNCTIONS:
            getattr(torch, name)(one)
    return list(VML_FUNCTIONS)
