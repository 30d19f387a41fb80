"""``runtime.cpu_paths``: portable mode's pinned CPU code paths (stages/numerics.py) — what is set where,
that a stage entry re-executes itself onto them, that MKL then runs on its vendor-neutral branch, and that
a portable training update makes no call to MKL's vector math (whose bits differ by vendor); native mode
changes nothing, and importing the library changes nothing in either."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from stages import numerics
from stages.errors import PipelineError
from stages.numerics import cpu_flags, mismatches, missing, pinned_environment

ROOT = Path(__file__).resolve().parents[1]
FLAGS = cpu_flags()
HAS_AVX2 = FLAGS is not None and {"avx2", "fma"} <= FLAGS
ON_PINNED_MKL = HAS_AVX2 and torch.backends.mkl.is_available()
PIN_VARS = (*numerics.VARIABLES, "ANATOMY_CPU_PATHS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")

PINNED = {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
          "NPY_DISABLE_CPU_FEATURES": numerics.NUMPY_DISABLED, "OPENBLAS_CORETYPE": "Haswell"}
NO_AVX2 = "runtime.cpu_paths: portable needs an x86 CPU with AVX2 and FMA, and this {} CPU has not (set it to native)"
ON_PINNED = {"torch_cpu": "AVX2", "torch_blas": "mkl", "mkl_cbwr": "COMPATIBLE", "onednn_max_isa": "AVX2",
             "openblas": ["Haswell"], "numpy_simd": ["X86_V3"]}


def test_pinned_environment_per_cpu():
    assert pinned_environment("x86_64", {"sse2", "avx", "avx2", "fma", "avx512f"}) == PINNED
    assert pinned_environment("AMD64", {"avx2", "fma"}) == PINNED
    # no AVX2 (or not x86): portable mode does not run, in one line
    for machine, flags in [("x86_64", {"sse2", "avx"}), ("x86_64", set()), ("aarch64", {"asimd", "avx2", "fma"})]:
        with pytest.raises(PipelineError) as err:
            pinned_environment(machine, flags)
        assert str(err.value) == NO_AVX2.format(machine)


def test_missing_names_what_the_environment_lacks():
    assert missing(PINNED, dict(PINNED, PATH="/bin")) == {}
    assert missing(PINNED, {**PINNED, "MKL_CBWR": "AUTO"}) == {"MKL_CBWR": "COMPATIBLE"}
    assert missing({"A": "1"}, {}) == {"A": "1"}


def test_cpuinfo_parsing(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 fma\n\n"
                    "processor\t: 1\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 fma\n")
    assert cpu_flags(info) == {"fpu", "sse2", "avx2", "fma"}
    assert cpu_flags(tmp_path / "missing") is None


def test_mismatches_name_each_path_that_differs():
    assert mismatches(ON_PINNED, PINNED) == []
    assert mismatches({**ON_PINNED, "torch_cpu": "AVX512", "openblas": ["SkylakeX"]}, PINNED) == [
        "torch computes on AVX512, not AVX2",
        "OpenBLAS on SkylakeX, not Haswell (OPENBLAS_CORETYPE set after numpy loaded)"]
    assert mismatches({**ON_PINNED, "mkl_cbwr": "AUTO"}, PINNED) == ["MKL on branch AUTO, not COMPATIBLE"]
    assert mismatches({**ON_PINNED, "onednn_max_isa": "ALL"}, PINNED) == ["oneDNN up to ALL, not AVX2"]
    assert mismatches({**ON_PINNED, "numpy_simd": ["X86_V3", "X86_V4", "AVX512_ICL"]}, PINNED) == [
        "numpy's SIMD loops on X86_V4, AVX512_ICL (NPY_DISABLE_CPU_FEATURES set after numpy loaded)"]
    assert mismatches({**ON_PINNED, "torch_blas": "other"}, PINNED) == ["torch's BLAS is not MKL"]
    assert mismatches({**ON_PINNED, "torch_cpu": "AVX512"}, {}) == []  # native mode: nothing expected


def _python(*args: str, **extra) -> subprocess.CompletedProcess:
    """``python *args`` in a fresh interpreter, its environment without the pinned variables plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in PIN_VARS}
    env.update(extra)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=True)


def _params_file(tmp_path, mode: str) -> str:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["runtime"] = {"threads": 1, "cpu_paths": mode}
    path = tmp_path / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(params))
    return str(path)


# What a fresh interpreter computes with, importing torch and numpy alone: native mode's known answer.
OWN_PATHS = ("import json, torch; from stages.numerics import in_effect; "
             "print(json.dumps({**in_effect(), 'mode': 'native', 'threads': 1}, sort_keys=True))")


def _stage(tmp_path, mode: str, **extra) -> dict:
    out = _python("-m", "stages.runtime", "--params", _params_file(tmp_path, mode), **extra)
    assert out.stderr == ""
    return json.loads(out.stdout)


@pytest.mark.skipif(not ON_PINNED_MKL, reason="the pinned paths need an x86 CPU with AVX2 and torch on MKL")
def test_a_portable_stage_computes_on_the_pinned_paths(tmp_path):
    """Set before numpy and torch load (stages.runtime.prepare at the top of the stage module): no re-exec."""
    assert _stage(tmp_path, "portable") == {**ON_PINNED, "mode": "portable", "threads": 1,
                                            "environment": {**PINNED, "OMP_WAIT_POLICY": "PASSIVE"}}


def test_a_native_stage_keeps_the_cpus_own_paths(tmp_path):
    own = json.loads(_python("-c", OWN_PATHS).stdout)
    assert _stage(tmp_path, "native") == {**own, "environment": {"OMP_WAIT_POLICY": "PASSIVE"}}
    # OpenMP's waiting as the environment chooses it
    assert _stage(tmp_path, "native", OMP_WAIT_POLICY="ACTIVE")["environment"] == {"OMP_WAIT_POLICY": "ACTIVE"}
    assert _stage(tmp_path, "native", GOMP_SPINCOUNT="1000")["environment"] == {"GOMP_SPINCOUNT": "1000"}


@pytest.mark.skipif(not ON_PINNED_MKL, reason="the pinned paths need an x86 CPU with AVX2 and torch on MKL")
def test_portable_in_process_after_numpy_says_so(tmp_path):
    """Outside a stage entry (a script that loaded numpy and torch first) nothing re-executes; the paths
    that differ are named in one line."""
    code = ("import numpy, torch, os; from stages.config import load_typed_params; from stages.runtime import "
            f"set_threads; set_threads(load_typed_params({_params_file(tmp_path, 'portable')!r})); "
            "print(os.environ.get('MKL_CBWR'))")
    late = _python("-c", code)
    assert late.stdout.strip() == "None"
    assert late.stderr.startswith("warning: torch computes on ") and late.stderr.endswith(
        ": results will differ in the last bits from a run on the pinned CPU code paths (stages/numerics.py)\n")
    assert late.stderr.count("\n") == 1


def test_a_stage_without_prepare_reexecutes_once(monkeypatch, repo_params):
    """A stage entry whose environment lacks what stages.runtime.process_environment asks for (numpy
    loaded before stages.runtime.prepare could act) re-executes itself, once, with it set."""
    from stages import runtime
    from stages.params import validate_params

    calls = []
    execv = lambda path, argv, env: calls.append((path, argv, env))  # noqa: E731
    monkeypatch.setattr(runtime, "pinned_environment", lambda: PINNED)
    monkeypatch.setattr(runtime, "is_stage_entry", lambda: True)
    portable = validate_params({**repo_params, "runtime": {"threads": 1, "cpu_paths": "portable"}})
    native = validate_params({**repo_params, "runtime": {"threads": 1, "cpu_paths": "native"}})
    runtime.enter(portable, {"PATH": "/bin"}, execv)
    runtime.enter(native, {"PATH": "/bin"}, execv)
    assert calls == [(sys.executable, [sys.executable, *sys.orig_argv[1:]],
                      {"PATH": "/bin", **PINNED, "OMP_WAIT_POLICY": "PASSIVE", "ANATOMY_CPU_PATHS": "portable"}),
                     (sys.executable, [sys.executable, *sys.orig_argv[1:]],
                      {"PATH": "/bin", "OMP_WAIT_POLICY": "PASSIVE", "ANATOMY_CPU_PATHS": "native"})]
    calls.clear()
    runtime.enter(portable, {**PINNED, "OMP_WAIT_POLICY": "PASSIVE"}, execv)  # all set already
    runtime.enter(native, {"OMP_WAIT_POLICY": "ACTIVE"}, execv)  # the environment's own choice
    runtime.enter(portable, {"ANATOMY_CPU_PATHS": "portable"}, execv)  # re-executed once already: no loop
    monkeypatch.setattr(runtime, "is_stage_entry", lambda: False)
    runtime.enter(portable, {"PATH": "/bin"}, execv)  # in-process: cannot re-execute
    assert calls == []


def test_portable_without_avx2_is_one_line(tmp_path, monkeypatch):
    from stages import numerics as nm
    from stages.config import load_typed_params
    from stages.runtime import set_threads

    monkeypatch.setattr(nm, "cpu_flags", lambda: {"sse2", "avx"})
    monkeypatch.setattr(nm.platform, "machine", lambda: "x86_64")
    with pytest.raises(PipelineError, match="^runtime.cpu_paths: portable needs an x86 CPU with AVX2 and FMA"):
        set_threads(load_typed_params(_params_file(tmp_path, "portable")))


# Importing the library changes nothing: known answers from a fresh interpreter that imports only the
# third-party libraries (scikit-learn sets KMP_DUPLICATE_LIB_OK and KMP_INIT_AT_FORK on import itself).
STATE = ("import json, os, torch; from stages.numerics import numpy_simd; "
         "print(json.dumps([torch.get_num_threads(), torch.backends.cpu.get_cpu_capability(), numpy_simd()]))")


@pytest.mark.parametrize("modules", ["stages.monitor", "stages", "stages.pipeline.train, stages.pipeline.landscape, stages.pipeline.measure"])
def test_importing_the_library_changes_nothing(modules):
    code = ("import os, sklearn; before = dict(os.environ); "
            f"import {modules}; "
            "changed = sorted(set(before.items()) ^ set(os.environ.items())); assert not changed, changed; "
            + STATE)
    assert _python("-c", code).stdout == _python("-c", "import sklearn; " + STATE).stdout


@pytest.mark.skipif(not ON_PINNED_MKL, reason="the pinned paths need an x86 CPU with AVX2 and torch on MKL")
def test_mkl_runs_on_the_compatible_branch():
    """MKL's verbose log names the branch a gemm ran on: COMPATIBLE on any vendor's CPU under portable
    mode's environment. (Asked for AVX2 on an AMD EPYC, the log read ``CNR:AUTO,STRICT``: MKL had
    fallen back without a word.)"""
    log = _python("-c", "import torch; a = torch.ones(64, 64); a @ a", MKL_VERBOSE="1", **PINNED).stdout
    branches = {part for line in log.splitlines() if "SGEMM" in line for part in line.split() if part.startswith("CNR:")}
    assert branches == {"CNR:COMPATIBLE"}, log[-2000:]


@pytest.mark.skipif(not ON_PINNED_MKL, reason="the pinned paths need an x86 CPU with AVX2")
def test_gelu_runs_oneDNN_avx2_kernels():
    """torch's GELU runs on oneDNN's JIT kernels, whose bits differ between AVX2 and AVX-512; portable
    mode's environment caps them at AVX2 (oneDNN's verbose log names the kernel it ran)."""
    code = "import torch; x = torch.randn(64, 512, requires_grad=True); torch.nn.functional.gelu(x).sum().backward()"
    log = _python("-c", code, ONEDNN_VERBOSE="1", **PINNED).stdout
    kernels = {part for line in log.splitlines() if ",primitive,exec,cpu,eltwise," in line
               for part in line.split(",") if part.startswith("jit:")}
    assert kernels == {"jit:avx2"}, log[-2000:]


def test_warm_vector_math_makes_each_first_call_on_one_element(monkeypatch):
    """Every function of the VML list is called once per precision, on one element (so on the
    calling thread alone: torch splits those kernels over threads only above 2048 elements)."""
    calls = []
    for name in numerics.VML_FUNCTIONS:
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda x, _n=name, _f=real: calls.append((_n, x.dtype, x.numel())) or _f(x))
    assert numerics.warm_vector_math() == list(numerics.VML_FUNCTIONS)
    assert sorted(calls, key=str) == sorted([(n, d, 1) for n in numerics.VML_FUNCTIONS
                                             for d in (torch.float32, torch.float64)], key=str)


def test_pin_threads_warms_vector_math_in_portable_mode_only(monkeypatch):
    """Every portable stage process pins its threads (stages.runtime), and with them resolves MKL's kernels."""
    import stages.runtime as runtime
    seen = []
    monkeypatch.setattr(runtime, "warm_vector_math", lambda: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    try:
        runtime.pin_threads(2, portable=True)
        runtime.pin_threads(1)
    finally:
        torch.set_num_threads(before)
    assert seen == [2]


# MKL's vector-math calls in a portable training process, seen from gdb: the warm-up makes the first call
# of each (pytorch/pytorch#188792), and a training update makes none (the fused AdamW takes its square
# roots with the CPU's instruction; VML's differ by vendor). Native mode runs torch's stock operators.
GDB = shutil.which("gdb")
UPDATE = """
import sys, torch
from stages.runtime import pin_threads
from stages.models.gpt import GPT, GPTConfig
from stages.training.loop import make_optimizer, update
pin_threads(2, portable=True)
print("PHASE update", flush=True)
torch.manual_seed(0)
model = GPT(GPTConfig(vocab_size=19, block_size=16, n_layer=2, n_head=4, d_model=128), portable_ops=True)
opt = make_optimizer(model, 1e-3, 0.1, (0.9, 0.98))
batch = torch.randint(0, 19, (8, 16))
for _ in range(2):
    update(model, opt, batch, 8, 1.0)
print("PHASE done", flush=True)
"""
# the landscape stage's Hessian-vector products (double backward through GELU and the loss)
HVP = """
import torch
from stages.runtime import pin_threads
from stages.measures.hessian import hessian_top_eigenvalues_repeated
from stages.models.gpt import GPT, GPTConfig
from stages.training.loop import answer_loss
pin_threads(2, portable=True)
print("PHASE update", flush=True)
torch.manual_seed(0)
model = GPT(GPTConfig(vocab_size=19, block_size=16, n_layer=2, n_head=4, d_model=64), portable_ops=True)
batch = torch.randint(0, 19, (8, 16))
hessian_top_eigenvalues_repeated(model, lambda m: answer_loss(m, batch, 8), k=1, maxiter=5, repeats=1)
print("PHASE done", flush=True)
"""
# the offline Pythia suite's model (transformers' GPT-NeoX: rotary tables) as stages/pipeline/train_suite.py steps it
SUITE_UPDATE = """
import torch
from stages.runtime import pin_threads
from stages.pythia import suite
pin_threads(2, portable=True)
print("PHASE update", flush=True)
tokenizer = suite.build_tokenizer()
model = suite.build_model(tokenizer, {"hidden_size": 64, "layers": 2, "heads": 4, "seq_len": 32}, 0)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
batch = next(suite.batches(tokenizer, 0, 4, 32))
for _ in range(2):
    loss = model(input_ids=batch, labels=batch).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
print("PHASE done", flush=True)
"""


COMPUTATIONS = {"gpt": UPDATE, "neox-suite": SUITE_UPDATE, "hessian": HVP}


def phases(code: str) -> tuple[str, str]:
    """A computation's setup (imports, pin_threads) and its body (between ``PHASE update`` and ``PHASE done``)."""
    setup, rest = code.split('print("PHASE update", flush=True)')
    return setup, rest.split('print("PHASE done"')[0]


def gdb_program(computations: dict[str, str]) -> str:
    """One process that runs each computation in turn (``PHASE warm`` and its setup, whose ``pin_threads``
    makes the warm-up calls; then ``PHASE <name>`` and its body), so gdb and torch load once for all."""
    parts = []
    for name, code in computations.items():
        setup, body = phases(code)
        parts += ['print("PHASE warm", flush=True)', setup, f'print("PHASE {name}", flush=True)', body]
    return "\n".join(parts + ['print("PHASE done", flush=True)']) + "\n"


@pytest.mark.skipif(GDB is None or not torch.backends.mkl.is_available(), reason="needs gdb and torch on MKL")
@pytest.mark.heavy
def test_a_training_update_calls_no_vector_math(tmp_path):
    names = [f"vm{t}{f}" for f in ("Acos", "Asin", "Atan", "Cos", "Erf", "Erfc", "ErfInv", "Exp", "Ln", "Log10",
                                   "Log2", "Sin", "Sqrt", "Tan", "Tanh", "Trunc", "Expm1", "Log1p", "Abs")
             for t in ("s", "d")]
    script = ["set breakpoint pending on", "set pagination off"]
    for name in names:
        script += [f"break {name}", "commands", "silent", f'printf "VML {name}\\n"', "continue", "end"]
    (tmp_path / "gdb.cmd").write_text("\n".join(script + ["run"]) + "\n")
    (tmp_path / "update.py").write_text(gdb_program(COMPUTATIONS))
    out = subprocess.run([GDB, "-q", "-batch", "-x", str(tmp_path / "gdb.cmd"), "--args", sys.executable,
                          str(tmp_path / "update.py")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, **PINNED, "PYTHONPATH": str(ROOT)})  # portable mode's environment
    phase, seen = "warm", {"warm": set(), **{name: set() for name in COMPUTATIONS}}
    for line in out.stdout.splitlines():
        if line.startswith("PHASE "):
            phase = line.split()[1]
        elif line.startswith("VML ") and phase in seen:
            seen[phase].add(line.split()[1])
    assert phase == "done", out.stdout[-2000:] + out.stderr[-2000:]
    assert len(seen.pop("warm")) == 2 * len(numerics.VML_FUNCTIONS)  # each listed function is a VML call
    # unfused, AdamW's denominator called vmsSqrt; the stock GPT-NeoX rotary tables vmsCos and vmsSin;
    # autograd's double backward of gelu and log_softmax vmsExp
    assert seen == {name: set() for name in COMPUTATIONS}


# The same property at torch's operator level, where gdb is missing (CI): no operator that ATen sends to
# VML (numerics.VML_FUNCTIONS) runs on a floating CPU tensor in the three computations above.
@pytest.mark.parametrize("code", list(COMPUTATIONS.values()), ids=list(COMPUTATIONS))
def test_no_vector_math_operator_runs(code):
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__.rstrip("_")
            if name in numerics.VML_FUNCTIONS and any(
                    isinstance(a, torch.Tensor) and a.is_floating_point() and a.device.type == "cpu" for a in args):
                seen.append(name)
            return func(*args, **(kwargs or {}))

    setup, body = phases(code)
    namespace, before = {}, torch.get_num_threads()
    try:
        exec(setup, namespace)  # imports, pin_threads (its warm-up calls each VML function once)
        with Watch():
            exec(body, namespace)
    finally:
        torch.set_num_threads(before)
    assert seen == []
