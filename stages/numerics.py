"""The CPU code paths every stage computes with, pinned so that other x86 machines write the same bits.

MKL, torch's own kernels (ATen), oneDNN (torch's GELU) and OpenBLAS (numpy, scipy, scikit-learn) each pick their kernels
from the CPU's instruction set when they first run: on an AVX-512 machine the AVX-512 kernels, on
another machine others, and each kernel rounds its sums in its own order. Unpinned, a newcomer's
``dvc repro`` on a different CPU writes different checkpoints from the first update on. MKL's gemm
also split their sums by the number of threads it happened to use. :func:`pin_code_paths` (run by
``stages/__init__.py`` before numpy or torch computes anything) pins all four to paths that every
x86 CPU since 2013 has, whoever made it:

* ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility on its one SSE2 code path
  without the approximation instructions (rcpps, rsqrtps) that differ between vendors: the only
  branch MKL honours on non-Intel CPUs (it falls back to its automatic choice for ``AVX2`` there).
  The p405k training step takes 1.6-1.95x its time on the AVX2 branch
  (``benchmarks/pinned_paths_cost.py``, on an AMD EPYC). Its gemm still splits sums by thread (``STRICT`` does not
  apply to it), so the thread count is pinned too: ``runtime.threads``.
* ``ATEN_CPU_CAPABILITY=avx2``: torch's vectorised kernels at AVX2.
* ``ONEDNN_MAX_CPU_ISA=AVX2``: oneDNN's JIT kernels (torch runs GELU's forward and backward there) at
  AVX2; on AVX-512 they give other bits.
* ``OPENBLAS_CORETYPE=Haswell``: OpenBLAS's AVX2 kernels, set only where the CPU has AVX2 and FMA
  (OpenBLAS would run the forced kernels even on a CPU without them).
* ``NPY_DISABLE_CPU_FEATURES``: numpy's own SIMD loops no higher than AVX2 (x86-64-v3). numpy picks
  them per CPU feature (AVX-512, Ice Lake's, Sapphire Rapids'), and its float64 ``exp`` and ``log``
  (and float32 ``log2``, ``expm1``, ``power``, ...) give other bits on the AVX-512 ones.

Two more things decide bits. Torch sends float ``sqrt``, ``exp``,
``log``, ``erf``, ``tanh``, ... on contiguous tensors to MKL's vector-math library (VML), one call per
intra-op thread on its chunk, and MKL picks each VML function's kernel lazily, on that function's
first call. When that first call comes from two threads at once, one thread can run a low-accuracy
kernel for its whole chunk of that one call (pytorch/pytorch#188792; oneMKL 2024.x, the build torch
2.13.0 carries). Here that call was AdamW's ``exp_avg_sq.sqrt()`` on the tied embedding at the first
update (2432 entries: above the 2048 at which those kernels split over threads), so now and then,
more often under load, one half of the embedding took other bits from update 1 on.
:func:`warm_vector_math`, run by ``stages.runtime.pin_threads`` in every stage process before it
computes, makes each of those first calls on one element, on one thread. And VML's kernels differ by
vendor under every branch (``vmsSqrt`` on an AMD EPYC is not correctly rounded in about 16% of
entries, where on Intel it matched exact square roots), so no stage sends its data there: the
optimisers run fused (``torch.optim.AdamW(fused=True)``: its square roots are the CPU's IEEE
instruction), RankMe's entropy is taken as a product of powers and ``mean_dominance``'s root as a
norm (stages/measures/rankme.py), the small GPT's GELU and loss take their second derivatives
without ``exp`` (stages/models/vendor_neutral_ops.py) and the GPT-NeoX rotary tables come from numpy
(stages/pythia/rotary.py). ``tests/test_numerics.py`` runs a training update of each model and a
Hessian-vector product under gdb and asserts that none calls VML.

The cost is measured, not guessed: ``benchmarks/pinned_paths_cost.py`` prints the training step's
time with the pinned paths against the CPU's own. ``ANATOMY_CPU_PATHS=native`` in the environment
leaves every library to its own choice (faster on AVX-512, not reproducible elsewhere), as does
importing numpy or torch before this package; the run
manifests record which paths were in effect (:func:`in_effect`), and a stage prints one warning
line when they differ from the pinned ones (:func:`mismatches`).

This file is a dvc.yaml dependency of every stage: changing a pinned path restales every result.
"""
from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

OPT_OUT = "ANATOMY_CPU_PATHS"
MKL_BRANCH = "COMPATIBLE"
TORCH_CAPABILITY = "avx2"
ONEDNN_ISA = "AVX2"
OPENBLAS_CORE = "Haswell"
# numpy's dispatch targets above x86-64-v3, by numpy 2.4's names and by the older ones (unknown names are ignored)
NUMPY_DISABLED = ("X86_V4 AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL "
                  "AVX512_SPR AVX512_FP16")
VARIABLES = ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE",
             "NPY_DISABLE_CPU_FEATURES")  # what may be set


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


def pinned_environment(machine: str, flags: set[str] | None) -> dict[str, str]:
    """The environment that pins the code paths on a CPU of architecture ``machine`` with ``flags``.

    x86 only (the variables mean nothing elsewhere). OpenBLAS's core type is forced only where the
    flags show AVX2 and FMA, because OpenBLAS does not check that the CPU can run it."""
    if machine.lower() not in ("x86_64", "amd64"):
        return {}
    env = {"MKL_CBWR": MKL_BRANCH, "ATEN_CPU_CAPABILITY": TORCH_CAPABILITY, "ONEDNN_MAX_CPU_ISA": ONEDNN_ISA,
           "NPY_DISABLE_CPU_FEATURES": NUMPY_DISABLED}
    if flags is not None and {"avx2", "fma"} <= flags:
        env["OPENBLAS_CORETYPE"] = OPENBLAS_CORE
    return env


def pin_code_paths(environ=None, loaded=None) -> dict[str, str]:
    """Set the pinned environment in ``environ`` (default ``os.environ``) and return what was set.

    Nothing is set when ``ANATOMY_CPU_PATHS`` is ``native``, or when numpy or torch is already among
    the ``loaded`` modules (default ``sys.modules``): the paths take effect only before numpy loads
    OpenBLAS and before torch's first kernel, so pinning then would be partial, and a script that
    imported torch before the monitor (stages.monitor) keeps its own paths. A stage
    (``python -m stages.<name>``) imports this package before anything else. Child processes
    (landscape workers, DVC's stage commands) inherit the environment."""
    environ = os.environ if environ is None else environ
    loaded = sys.modules if loaded is None else loaded
    if environ.get(OPT_OUT, "").lower() == "native" or "numpy" in loaded or "torch" in loaded:
        return {}
    env = pinned_environment(platform.machine(), cpu_flags())
    environ.update(env)
    return env


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
    Without a pinned environment (not x86, or opted out) the paths are the machine's own."""
    if not pinned:
        return ["the CPU's own code paths (not pinned: not x86, ANATOMY_CPU_PATHS=native, or numpy or torch "
                "imported before the stages package)"]
    found = []
    if effect["torch_cpu"].lower() != TORCH_CAPABILITY:
        found.append(f"torch computes on {effect['torch_cpu']}, not {TORCH_CAPABILITY.upper()}")
    if effect["torch_blas"] == "mkl" and effect["mkl_cbwr"] != MKL_BRANCH:
        found.append(f"MKL on branch {effect['mkl_cbwr']}, not {MKL_BRANCH}")
    if effect["onednn_max_isa"] != ONEDNN_ISA:
        found.append(f"oneDNN up to {effect['onednn_max_isa']}, not {ONEDNN_ISA}")
    if effect["torch_blas"] != "mkl":
        found.append("torch's BLAS is not MKL")
    if "OPENBLAS_CORETYPE" not in pinned:
        found.append("OpenBLAS on the CPU's own kernels (no AVX2 and FMA found)")
    elif any(arch != OPENBLAS_CORE for arch in effect["openblas"]):
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
