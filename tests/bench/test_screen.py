"""The static screen (stage 1): each rule fires with its id and line, and correct code passes.

Positive cases mark the line that must be reported with ``#!``; the screen is pure AST, so the
whole file runs in well under a second.
"""

from __future__ import annotations

import pytest

from aka.bench import screen_source
from tests.bench.conftest import CANDIDATES, EXAMPLES, fixture_candidate

KERNEL = (
    "import triton\nimport triton.language as tl\nimport torch\n\n"
    "@triton.jit\ndef _k(x_ptr):\n    pass\n\n"
)


def _forward(body: str, imports: str = "", module: str = "") -> str:
    """A candidate with ``imports`` first, then the kernel, ``module`` code and forward(x)."""
    lines = "".join(f"        {line}\n" for line in body.splitlines())
    head = imports + ("\n" if imports else "") + KERNEL + module + ("\n" if module else "")
    return head + "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n" + lines


def rules(source: str, **kwargs: object) -> list[str]:
    return [f.rule for f in screen_source(source, **kwargs).findings]  # type: ignore[arg-type]


def _marked(source: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if line.endswith("#!"))


# ------------------------------------------------------------------ no false rejections
EXAMPLE_CANDIDATES = sorted(p.relative_to(EXAMPLES) for p in EXAMPLES.glob("*/candidate*.py"))
#: Fixtures that are wrong at run time only: the screen must let them through to be judged.
RUNTIME_WRONG = [
    "rms_norm_no_tail_mask.py",
    "rms_norm_drop_last_row.py",
    "rms_norm_nan.py",
    "rms_norm_zeros.py",
    "rms_norm_wrong_dtype.py",
    "rms_norm_raise.py",
    "rms_norm_hang.py",
]


@pytest.mark.parametrize("path", EXAMPLE_CANDIDATES, ids=str)
def test_screen_passes_every_example_candidate(path: object) -> None:
    report = screen_source((EXAMPLES / str(path)).read_text(), allow_tf32=False)
    assert report.passed, report.findings
    assert report.kernel_kinds == ("triton",)
    assert report.entry_class == "ModelNew"


@pytest.mark.parametrize("name", RUNTIME_WRONG)
def test_screen_passes_fixtures_that_are_wrong_only_at_run_time(name: str) -> None:
    report = screen_source(fixture_candidate(name))
    assert report.passed, report.findings


def test_screen_passes_the_problem_fixture_candidates() -> None:
    for path in sorted((CANDIDATES.parent / "problems").glob("*/candidate*.py")):
        assert screen_source(path.read_text()).passed, path


def test_screen_rejects_the_crash_fixture_only_for_its_ctypes() -> None:
    # rms_norm_crash reaches its segfault through ctypes, which the native-code rule forbids
    findings = screen_source(fixture_candidate("rms_norm_crash.py")).findings
    assert {f.rule for f in findings} == {"native-code"}


# ------------------------------------------------------------------ the first version's tests
@pytest.mark.parametrize(
    ("body", "snippet"),
    [
        ("return torch.rsqrt(x)", "torch.rsqrt"),
        ("return torch.nn.functional.softmax(x, -1)", "torch.nn.functional.softmax"),
        ("return F.silu(x)", "F.silu"),
        ("return x.float()", ".float()"),
        ("return x.sum(-1)", ".sum()"),
        ("return x @ x", "'@'"),
        ("return th.exp(x)", "th.exp"),
    ],
)
def test_screen_rejects_torch_compute_in_forward(body: str, snippet: str) -> None:
    imports = "import torch.nn.functional as F\nimport torch as th\n"
    report = screen_source(imports + KERNEL + _forward(body)[len(KERNEL) :])
    finding = next(f for f in report.findings if f.rule == "torch-compute-in-forward")
    assert snippet in finding.message
    assert finding.line == len((imports + KERNEL).splitlines()) + 3


def test_screen_follows_helpers_called_from_forward() -> None:
    source = KERNEL + (
        "def helper(x):\n    return torch.exp(x)\n\n"
        "class ModelNew(torch.nn.Module):\n"
        "    def _inner(self, x):\n        return helper(x)\n"
        "    def forward(self, x):\n        return self._inner(x)\n"
    )
    findings = screen_source(source).findings
    assert [f.rule for f in findings] == ["torch-compute-in-forward"]
    assert "helper()" in findings[0].message


def test_screen_allows_allocation_and_launch_glue() -> None:
    body = (
        "y = torch.empty_like(x)\nn = triton.cdiv(x.shape[0], 4)\n"
        "z = x.view(-1).contiguous()\n_k[(n,)](y)\nreturn y"
    )
    assert rules(_forward(body)) == []


def test_screen_ignores_math_outside_the_hot_path() -> None:
    source = (
        _forward("return x") + "\ndef make_table():\n    return torch.arange(10).float().exp()\n"
    )
    assert rules(source) == []


def test_screen_requires_a_kernel() -> None:
    assert "no-kernel" in rules(fixture_candidate("rms_norm_no_kernel.py"))


def test_screen_accepts_load_inline_as_a_kernel() -> None:
    source = (
        "import torch\nfrom torch.utils.cpp_extension import load_inline\n"
        "mod = load_inline(name='m', cpp_sources='', cuda_sources='')\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return mod.run(x)\n"
    )
    report = screen_source(source)
    assert report.passed
    assert report.kernel_kinds == ("cuda",)


def test_screen_rejects_reference_use() -> None:
    assert "reference-use" in rules("from reference import Model\n" + _forward("return x"))
    assert "reference-use" in rules(_forward("return Model()(x)"))
    subclass = KERNEL + "class ModelNew(Model):\n    def forward(self, x):\n        return x\n"
    assert "reference-use" in rules(subclass)


def test_screen_rejects_dynamic_code() -> None:
    findings = screen_source(_forward("exec('y = 1')\nreturn eval('x')")).findings
    assert [(f.rule, f.line) for f in findings] == [("dynamic-code", 11), ("dynamic-code", 12)]


def test_screen_requires_modelnew() -> None:
    assert rules(KERNEL + "class Other:\n    pass\n") == ["no-entry"]


def test_screen_raises_syntax_error() -> None:
    with pytest.raises(SyntaxError):
        screen_source(fixture_candidate("rms_norm_syntax.py"))


def test_screen_rejects_torch_fallback_fixture() -> None:
    assert "torch-compute-in-forward" in rules(fixture_candidate("rms_norm_torch_fallback.py"))


# ------------------------------------------------------------------ every rule, with its line
COMPUTE = "torch-compute-in-forward"
HOT_CASES: list[tuple[str, str, str, str]] = [
    # (rule, body of forward, imports, module-level code)
    (COMPUTE, "return th.exp(x)  #!", "import torch as th", ""),
    (COMPUTE, "return F.gelu(x)  #!", "import torch.nn.functional as F", ""),
    (COMPUTE, "return r(x)  #!", "from torch import rsqrt as r", ""),
    (COMPUTE, "return functional.relu(x)  #!", "from torch.nn import functional", ""),
    (COMPUTE, "return gelu(x)  #!", "from torch.nn.functional import *", ""),
    (COMPUTE, "return F.silu(x)  #!", "", "F = torch.nn.functional"),
    (COMPUTE, "return op(x)  #!", "", "op = torch.rsqrt"),
    (COMPUTE, "return t.exp(x)  #!", "", "t = torch"),
    (COMPUTE, "fn = getattr(torch, 'rsqrt')\nreturn fn(x)  #!", "", ""),
    (COMPUTE, "return getattr(getattr(torch, 'nn'), 'functional').relu(x)  #!", "", ""),
    (COMPUTE, "return getattr(torch, 'rs' + 'qrt')(x)  #!", "", ""),
    (COMPUTE, "return getattr(torch, f\"rs{'qrt'}\")(x)  #!", "", ""),
    (COMPUTE, "return getattr(torch, NAME)(x)  #!", "", "NAME = 'exp'"),
    (COMPUTE, "return operator.attrgetter('rsqrt')(torch)(x)  #!", "import operator", ""),
    (COMPUTE, "return operator.methodcaller('exp')(x)  #!", "import operator", ""),
    (COMPUTE, "a, b = torch.exp, torch.log\nreturn a(x)  #!", "", ""),
    (COMPUTE, "return helper(x)", "", "def helper(t, op=torch.exp):\n    return op(t)  #!"),
    (COMPUTE, "f = lambda t: torch.exp(t)  #!\nreturn f(x)", "", ""),
    (COMPUTE, "return EXP(x)", "", "EXP = lambda t: torch.exp(t)  #!"),
    (COMPUTE, "return functools.partial(torch.exp)(x)  #!", "import functools", ""),
    (COMPUTE, "return OPS['e'](x)  #!", "", "OPS = {'e': torch.exp}"),
    (COMPUTE, "for op in OPS:\n    x = op(x)  #!\nreturn x", "", "OPS = (torch.exp, torch.log)"),
    (COMPUTE, "return get_op()(x)  #!", "", "def get_op():\n    return torch.exp"),
    (COMPUTE, "return Ops.e(x)  #!", "", "class Ops:\n    e = torch.exp"),
    (COMPUTE, "return Ops().e(x)  #!", "", "class Ops:\n    e = staticmethod(torch.exp)"),
    (COMPUTE, "return list(map(torch.exp, [x]))  #!", "", ""),
    (COMPUTE, "return list(map(helper, [x]))", "", "def helper(t):\n    return t.exp()  #!"),
    (COMPUTE, "fn = helper\nreturn fn(x)", "", "def helper(t):\n    return t * 2  #!"),
    (COMPUTE, "def inner(t):\n    return torch.exp(t)  #!\nreturn inner(x)", "", ""),
    (
        COMPUTE,
        "return Op()(x)",
        "",
        "class Op:\n    def __call__(self, t):\n        return t.sum()  #!",
    ),
    (
        COMPUTE,
        "return Op().run(x)",
        "",
        "class Op:\n    def run(self, t):\n        return t.abs()  #!",
    ),
    (COMPUTE, "return x.exp()  #!", "", ""),
    (COMPUTE, "return x.__add__(x)  #!", "", ""),
    (COMPUTE, "return torch.Tensor.exp(x)  #!", "", ""),
    (COMPUTE, "return getattr(x, 'exp')()  #!", "", ""),
    (COMPUTE, "s = x.sum  #!\nreturn s()", "", ""),
    (COMPUTE, "return x @ x  #!", "", ""),
    (COMPUTE, "x @= x  #!\nreturn x", "", ""),
    (COMPUTE, "return x + 1  #!", "", ""),
    (COMPUTE, "y = x.view(-1)\nreturn y * 2  #!", "", ""),
    (COMPUTE, "y = torch.empty_like(x)\nreturn y - 1  #!", "", ""),
    (COMPUTE, "a, b = x.chunk(2)\nreturn a / b  #!", "", ""),
    (COMPUTE, "x += 1  #!\nreturn x", "", ""),
    (COMPUTE, "return -x  #!", "", ""),
    (COMPUTE, "return x > 0  #!", "", ""),
    (COMPUTE, "return helper(x, x)", "", "def helper(a, b):\n    return a ** b  #!"),
    (COMPUTE, "return sum([x, x])  #!", "", ""),
    (COMPUTE, "return operator.mul(x, x)  #!", "import operator", ""),
    (COMPUTE, "return x.to(torch.float16)  #!", "", ""),
    (COMPUTE, "return x.type(torch.float16)  #!", "", ""),
    (COMPUTE, "return x.clone()  #!", "", ""),
    (COMPUTE, "y = torch.empty_like(x)\ny.copy_(x)  #!\nreturn y", "", ""),
    (COMPUTE, "x.fill_(0)  #!\nreturn x", "", ""),
    (COMPUTE, "y = x.view(-1)\ny[0] = 1  #!\nreturn y", "", ""),
    (COMPUTE, "i = torch.zeros(2, dtype=torch.long)\nreturn x[i]  #!", "", ""),
    (COMPUTE, "return torch.ops.aten.add(x, x)  #!", "", ""),
    (COMPUTE, "return torch._C._nn.gelu(x)  #!", "", ""),
    (COMPUTE, "return torch.special.erf(x)  #!", "", ""),
    (COMPUTE, "return torch.linalg.norm(x)  #!", "", ""),
    (COMPUTE, "return self.w * x  #!", "", ""),
    ("vendor-library", "return np.exp(3)  #!", "import numpy as np", ""),
    ("mutable-cache", "self.last = x  #!\nreturn x", "", ""),
    ("mutable-cache", "self.cache.append(x)  #!\nreturn x", "", ""),
    ("mutable-cache", "setattr(self, 'last', x)  #!\nreturn x", "", ""),
    ("mutable-cache", "return CACHE[1]  #!", "", "CACHE = {}"),
    ("mutable-cache", "return hash(x)  #!", "", ""),
    ("mutable-cache", "return hashlib.sha1(b'')  #!", "import hashlib", ""),
    ("mutable-cache", "return x.tolist()  #!", "", ""),
    ("mutable-cache", "return x.cpu()  #!", "", ""),
    ("mutable-cache", "return id(x)  #!", "", ""),
    ("nn-layer", "torch.nn.init.normal_(x)  #!\nreturn x", "", ""),
]


@pytest.mark.parametrize(("rule", "body", "imports", "module"), HOT_CASES)
def test_screen_reports_hot_path_rule_at_its_line(
    rule: str, body: str, imports: str, module: str
) -> None:
    source = _forward(body, imports, module).replace(
        "    def forward(self, x):\n",
        "    def __init__(self):\n        super().__init__()\n"
        "        self.w = torch.nn.Parameter(torch.ones(3))\n        self.cache = []\n"
        "    def forward(self, x):\n",
    )
    found = [(f.rule, f.line) for f in screen_source(source).findings]
    assert (rule, _marked(source)) in found, found


ANYWHERE_CASES: list[tuple[str, str]] = [
    ("torch-compute-in-forward", "from torch import *  #!"),
    ("nn-layer", "layer = torch.nn.Linear(3, 3)  #!"),
    ("nn-layer", "L = torch.nn.Linear\nlayer = L(3, 3)  #!"),
    ("nn-layer", "class Wrapper(torch.nn.Conv2d):  #!\n    pass"),
    ("nn-layer", "stack = torch.nn.Sequential(object())  #!"),
    ("torch-compile", "f = torch.compile(lambda t: t)  #!"),
    ("torch-compile", "@torch.jit.script  #!\ndef g(t):\n    return t"),
    ("torch-compile", "from torch._inductor import config  #!"),
    ("torch-compile", "@torch.library.custom_op('me::op', mutates_args=())\ndef op(t):  #!\n"
     "    return t.exp()"),  # fmt: skip
    ("vendor-library", "import flash_attn  #!"),
    ("vendor-library", "from vllm import _custom_ops as ops  #!"),
    ("vendor-library", "import triton.ops  #!"),
    ("vendor-library", "f = torch.ops.sgl_kernel.rmsnorm  #!"),
    ("vendor-library", "NS = 'vllm::x'\nf = torch.ops.vllm.rms_norm  #!"),
    ("vendor-library", "CUDA = '#include <cublas_v2.h>'  #!"),
    ("reference-use", "from reference import Model  #!"),
    ("reference-use", "import _aka_reference  #!"),
    ("reference-use", "from .reference_impl import f  #!"),
    ("reference-use", "m = importlib.import_module('reference')  #!"),
    ("reference-use", "M = getattr(object, 'Model')  #!"),
    ("reference-use", "KEY = '_aka_reference'  #!"),
    ("introspection", "import inspect  #!"),
    ("introspection", "import gc  #!"),
    ("introspection", "f = sys._getframe(0)  #!"),
    ("introspection", "m = sys.modules  #!"),
    ("introspection", "g = globals()  #!"),
    ("introspection", "v = vars(torch)  #!"),
    ("introspection", "c = (lambda: 0).__code__  #!"),
    ("introspection", "b = (lambda: 0).__globals__  #!"),
    ("introspection", "s = object.__subclasses__()  #!"),
    ("introspection", "d = torch.__dict__  #!"),
    ("introspection", "def f(name):\n    return torch.__getattribute__(name)  #!"),
    ("introspection", "def f(frame):\n    return frame.f_back  #!"),
    ("introspection", "import builtins  #!"),
    ("introspection", "SRC = __doc__  #!"),
    ("dynamic-code", "exec('x = 1')  #!"),
    ("dynamic-code", "e = eval  #!"),
    ("dynamic-code", "e = getattr(builtins, 'exec')  #!"),
    ("dynamic-code", "m = __import__('os')  #!"),
    ("dynamic-code", "m = importlib.import_module('os')  #!"),
    ("dynamic-code", "f = types.FunctionType  #!"),
    ("dynamic-code", "o = pickle.loads(b'')  #!"),
    ("dynamic-code", "import marshal  #!"),
    ("dynamic-attr", "def f(name):\n    return getattr(torch, name)  #!"),
    ("dynamic-attr", "def f(name):\n    setattr(torch.cuda, name, 1)  #!"),
    ("dynamic-attr", "def f(name):\n    return operator.attrgetter(name)  #!"),
    ("dynamic-attr", "def f(name):\n    return operator.methodcaller(name)  #!"),
    ("native-code", "import ctypes  #!"),
    ("native-code", "from cffi import FFI  #!"),
    ("native-code", "os.system('true')  #!"),
    ("native-code", "os.execv('/bin/true', [])  #!"),
    ("native-code", "torch.ops.load_library('x.so')  #!"),
    ("native-code", "from torch.utils.cpp_extension import load  #!"),
    ("native-code", "from torch.utils.cpp_extension import load_inline\n"
     "m = load_inline(name='m', cpp_sources=open('a.cpp').read())  #!"),  # fmt: skip
    ("native-code", "P = '/proc/self/maps'  #!"),
    ("monkeypatch", "time.perf_counter = lambda: 0.0  #!"),
    ("monkeypatch", "torch.cuda.Event.elapsed_time = None  #!"),
    ("monkeypatch", "torch.Tensor.__add__ = None  #!"),
    ("monkeypatch", "triton.testing.do_bench = None  #!"),
    ("monkeypatch", "builtins.print = None  #!"),
    ("monkeypatch", "Model.forward = None  #!"),
    ("monkeypatch", "sys.modules['torch'] = None  #!"),
    ("monkeypatch", "t = torch\nt.exp = None  #!"),
    ("monkeypatch", "from torch.cuda import Event\nEvent.record = None  #!"),
    ("monkeypatch", "del torch.exp  #!"),
    ("monkeypatch", "setattr(time, 'time', None)  #!"),
    ("monkeypatch", "object.__setattr__(torch, 'exp', None)  #!"),
    ("monkeypatch", "from unittest import mock  #!"),
    ("concurrency", "import threading  #!"),
    ("concurrency", "from concurrent.futures import ThreadPoolExecutor  #!"),
    ("concurrency", "import subprocess  #!"),
    ("concurrency", "pid = os.fork()  #!"),
    ("concurrency", "import atexit  #!"),
    ("stream", "s = torch.cuda.Stream()  #!"),
    ("stream", "ctx = torch.cuda.stream(None)  #!"),
    ("stream", "e = torch.cuda.Event(enable_timing=True)  #!"),
    ("stream", "torch.cuda.synchronize()  #!"),
    ("stream", "def f(s, t):\n    s.wait_stream(t)  #!"),
    ("stream", "def f(t, s):\n    t.record_stream(s)  #!"),
    ("stream", "SRC = 'void f() { cudaDeviceSynchronize(); }'  #!"),
    ("cuda-graph", "g = torch.cuda.CUDAGraph()  #!"),
    ("cuda-graph", "ctx = torch.cuda.graph  #!"),
    ("cuda-graph", "f = torch.cuda.make_graphed_callables  #!"),
    ("cuda-graph", "SRC = 'cudaStreamBeginCapture(s, m);'  #!"),
    ("mutable-cache", "global STATE  #!"),
    ("mutable-cache", "def outer():\n    n = 0\n    def inner():\n        nonlocal n  #!"),
    ("mutable-cache", "CACHE = {}\ndef put(k, v):\n    CACHE[k] = v  #!"),
    ("mutable-cache", "SEEN = []\ndef put(v):\n    SEEN.append(v)  #!"),
    ("mutable-cache", "MEMO = dict()\ndef put(v):\n    MEMO.update(v)  #!"),
    ("mutable-cache", "@functools.lru_cache(maxsize=None)  #!\ndef f(n):\n    return n"),
    ("mutable-cache", "@functools.cache  #!\ndef f(n):\n    return n"),
    ("mutable-cache", "def f(t, cache):\n    return cache[t.data_ptr()]  #!"),
    ("mutable-cache", "def f(t):\n    key = (t.data_ptr(), t.shape)\n    return {key: t}  #!"),
    ("mutable-cache", "def f(a, b):\n    return a.data_ptr() == b.data_ptr()  #!"),
    ("precision-mode", "torch.backends.cuda.matmul.allow_tf32 = True  #!"),
    ("precision-mode", "torch.backends.cudnn.allow_tf32 = True  #!"),
    ("precision-mode", "m = torch.backends.cuda.matmul\n"
     "m.allow_fp16_reduced_precision_reduction = 1  #!"),
    ("precision-mode", "torch.set_float32_matmul_precision('high')  #!"),
    ("precision-mode", "torch.set_default_dtype(torch.float16)  #!"),
    ("precision-mode", "ctx = torch.autocast('cuda')  #!"),
    ("precision-mode", "scaler = torch.cuda.amp.GradScaler  #!"),
    ("file-io", "f = open('/tmp/x')  #!"),
    ("file-io", "os.environ['X'] = '1'  #!"),
    ("file-io", "os.environ.update(X='1')  #!"),
    ("file-io", "os.putenv('X', '1')  #!"),
    ("file-io", "def f(p):\n    return p.write_text('x')  #!"),
    ("file-io", "import shutil  #!"),
    ("file-io", "import socket  #!"),
    ("file-io", "import urllib.request  #!"),
    ("file-io", "torch.save({}, 'x.pt')  #!"),
]  # fmt: skip
ANYWHERE_IMPORTS = "import builtins, functools, importlib, operator, os, pickle, sys, time, types\n"


@pytest.mark.parametrize(("rule", "module"), ANYWHERE_CASES)
def test_screen_reports_file_rule_at_its_line(rule: str, module: str) -> None:
    source = _forward("return x", ANYWHERE_IMPORTS, module)
    found = [(f.rule, f.line) for f in screen_source(source).findings]
    assert (rule, _marked(source)) in found, found


def test_screen_reports_one_finding_per_rule_and_line() -> None:
    findings = screen_source(_forward("return x.exp().log().sum()")).findings
    assert [(f.rule, f.line) for f in findings] == [("torch-compute-in-forward", 11)]


def test_screen_messages_say_what_to_do() -> None:
    (finding,) = screen_source(_forward("return torch.rsqrt(x)")).findings
    assert "torch.rsqrt" in finding.message and "your own kernel" in finding.message


# ------------------------------------------------------------------ legitimate idioms pass
LEGIT_CASES: list[tuple[str, str, str]] = [
    # (body of forward, imports, module-level code)
    ("n = x.shape[0] * 2\nm = x.numel() // 4\ng = triton.cdiv(n, 4) + 1\n"
     "return torch.empty(n + m + g, device=x.device)", "", ""),
    ("h = x.shape[-1]\nx2 = x.reshape(-1, h).contiguous()\n"
     "y = torch.empty((x2.shape[0], h), dtype=x.dtype, device=x.device)\n"
     "if x.dim() == 2 and x.is_contiguous() and x.dtype == torch.float16:\n    pass\n"
     "assert x.shape == y.shape and x.stride(0) > 0\n_k[(triton.cdiv(h, 4),)](y)\n"
     "return y.view(x.shape)", "", ""),
    ("a, b = x.chunk(2, dim=-1)\ny = a.new_empty(a.shape)\nz = x.new_zeros((3,))\n"
     "w = x.unsqueeze(0).expand(2, -1).permute(1, 0).transpose(0, 1)[0, 1:2, None, ...]\n"
     "return y", "", ""),
    ("y = torch.empty_like(x)\ny.zero_()\ny.fill_(1)\nreturn y", "", ""),
    ("with torch.no_grad():\n    y = torch.empty_like(x)\nok = x.data_ptr() % 16 == 0\nreturn y",
     "", ""),
    ("sms = torch.cuda.get_device_properties(x.device).multi_processor_count\n"
     "_k[(max(x.shape[0], 1) * sms,)](x, UP=_interp())\nreturn x",
     "import os", "def _interp():\n    return os.environ.get('TRITON_INTERPRET') == '1'"),
    ("b = BLOCKS[0]\nreturn torch.empty(min(MAX_TILE, b), dtype=torch.float32)", "",
     "BLOCKS = (16, 32)\nNAMES = frozenset({'a'})\nMAX_TILE = 16384\nEPS = 1e-6"),
    ("y = torch.empty_like(x)\n_k2[(1,)](y, x.numel())\nreturn y", "",
     "configs = [triton.Config({'BLOCK': b}, num_warps=4) for b in (16, 32)]\n"
     "@triton.autotune(configs=configs, key=['n'])\n@triton.jit\n"
     "def _k2(x_ptr, n, BLOCK: tl.constexpr):\n    pass"),
    ("return mod.run(x.contiguous())", "from torch.utils.cpp_extension import load_inline",
     "CUDA = r'''\n#include <torch/extension.h>\n__global__ void k(float* y) {}\n"
     "torch::Tensor run(torch::Tensor x) {\n    auto y = torch::empty_like(x);\n"
     "    k<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>());\n"
     "    return y;\n}\n'''\n"
     "mod = load_inline(name='m', cpp_sources='torch::Tensor run(torch::Tensor x);',\n"
     "                  cuda_sources=CUDA, functions=['run'])"),
    ("return torch.ops.mine.run(x)", "", "LIB = torch.library.Library('mine', 'DEF')"),
    ("for t in (x,):\n    s = t.stride(0) * 2\nreturn x", "", ""),
    ("return x", "",
     "class Helper:\n    def __init__(self):\n        self.t = torch.arange(3).exp()"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "imports", "module"), LEGIT_CASES)
def test_screen_passes_legitimate_idioms(body: str, imports: str, module: str) -> None:
    assert rules(_forward(body, imports, module), allow_tf32=False) == []


def test_screen_allows_precomputation_and_state_in_init() -> None:
    source = KERNEL + (
        "class ModelNew(torch.nn.Module):\n"
        "    def __init__(self, n: int = 4):\n"
        "        super().__init__()\n"
        "        self.n = n\n"
        "        self.w = torch.nn.Parameter(torch.empty(n))\n"
        "        torch.nn.init.normal_(self.w)\n"
        "        self.register_buffer('table', torch.arange(n).float().exp())\n"
        "    def forward(self, x, k: int = 2):\n"
        "        y = torch.empty_like(x)\n"
        "        _k[(x.shape[1] // k,)](y, self.w, self.table, self.n * 2)\n"
        "        return y\n"
    )
    assert rules(source) == []


def test_screen_treats_forward_scalars_as_scalars() -> None:
    source = KERNEL + (
        "class ModelNew(torch.nn.Module):\n"
        "    def forward(self, x, heads):\n"
        "        return x.reshape(x.shape[0], x.shape[1] // heads, -1)\n"
    )
    assert rules(source) == []


def test_screen_follows_base_classes_and_instances_made_in_init() -> None:
    source = KERNEL + (
        "class Base(torch.nn.Module):\n    def go(self, t):\n        return t.exp()\n"
        "class Op:\n    def __call__(self, t):\n        return t.log()\n"
        "class ModelNew(Base):\n"
        "    def __init__(self):\n        super().__init__()\n        self.op = Op()\n"
        "    def forward(self, x):\n        return self.op(self.go(x))\n"
    )
    found = [(f.rule, f.line) for f in screen_source(source).findings]
    assert found == [(COMPUTE, 11), (COMPUTE, 14)]


def test_screen_kernels_are_not_hot_path() -> None:
    source = KERNEL + (
        "@triton.jit\ndef _twice(x_ptr, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n    x = tl.load(x_ptr + offs)\n"
        "    tl.store(x_ptr + offs, tl.exp(x) * 2 + x.to(tl.float32))\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
        "        _twice[(1,)](x, BLOCK=16)\n        return x\n"
    )
    assert rules(source) == []


# ------------------------------------------------------------------ the dtype policy
DOT = "@triton.jit\ndef _mm(a, b):\n    c = tl.dot(a, b{})\n\n"


@pytest.mark.parametrize(
    ("keywords", "flagged"),
    [
        ("", False),
        (", input_precision='ieee'", False),
        (", allow_tf32=False", False),
        (", allow_tf32=True", True),
        (", input_precision='tf32'", True),
        (", input_precision='tf32x3'", True),
    ],
)
def test_screen_flags_explicit_tf32_dots_only_without_tf32(keywords: str, flagged: bool) -> None:
    source = _forward("return x", module=DOT.format(keywords))
    assert rules(source) == []
    assert rules(source, allow_tf32=False) == (["precision-mode"] if flagged else [])


# ------------------------------------------------------------------ the allow list
def test_screen_allow_list_waives_a_rule() -> None:
    source = _forward("return x.float()")
    assert rules(source, allow=["torch-compute-in-forward"]) == []
    assert rules(source, allow=["torch-compute-in-forward:.float()"]) == []
    assert rules(source, allow=["torch-compute-in-forward:.sum()"]) == ["torch-compute-in-forward"]


def test_screen_allow_list_text_matches_the_message_of_that_rule_only() -> None:
    source = _forward("return torch.rsqrt(x)", module="import threading")
    assert rules(source, allow=["torch-compute-in-forward:torch.rsqrt"]) == ["concurrency"]
    assert rules(source, allow=["concurrency:torch.rsqrt", "nn-layer"]) == [
        "concurrency",
        "torch-compute-in-forward",
    ]
    assert rules(source, allow=["concurrency", "torch-compute-in-forward:rsqrt"]) == []


def test_screen_resolves_alias_cycles_whatever_the_order() -> None:
    module = "a = b\nb = a\nb = torch.exp\nc = a"
    source = _forward("return c(x)  #!", module=module)
    assert ("torch-compute-in-forward", _marked(source)) in [
        (f.rule, f.line) for f in screen_source(source).findings
    ]


def test_screen_gives_up_on_a_tangle_of_aliases() -> None:
    names = [f"a{i}" for i in range(60)]
    module = "\n".join(f"{n} = {' or '.join(names)}" for n in names)
    findings = screen_source(_forward("return x", module=module)).findings
    assert "screen-limit" in [f.rule for f in findings]
