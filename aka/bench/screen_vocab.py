"""The static screen's vocabulary: which names, attributes and source patterns belong to a rule.

Owns the tables behind ``aka.bench.screen``: qualified-name prefixes per rule (``NAME_RULES``),
attribute names per rule, the torch names and tensor methods that compute (and those that only
allocate, view, describe or launch), the container mutators, and the patterns matched in
``load_inline`` C++ sources. Holds data and pure predicates on qualified names only: it never sees
a tree.
"""

from __future__ import annotations

import re

__all__ = [
    "ATTR_RULES",
    "COMPUTE",
    "CONTAINER_CALLS",
    "CPP_ALLOWED",
    "CPP_METHOD_CALL",
    "CPP_TOKENS",
    "CPP_TORCH_CALL",
    "DUNDER_MATH",
    "IMPORT_RULES",
    "MODULE_LIKE",
    "MUTATORS",
    "NAME_RULES",
    "NN_ALLOWED",
    "PARAMETER_CLASSES",
    "REFERENCE_MODULES",
    "TENSOR_ALLOWED",
    "TENSOR_MATH",
    "TENSOR_META",
    "TORCH_ALLOWED",
    "TORCH_ALLOWED_SUBMODULES",
    "TORCH_DTYPES",
    "TORCH_LIBRARY",
    "TORCH_NOT_TENSOR",
    "TORCH_OWN_OPS",
    "VALUE_PREFIXES",
    "is_value_name",
    "name_rule",
    "torch_computes",
    "words",
]

#: The rule id of computing with torch on the hot path.
COMPUTE = "torch-compute-in-forward"


def words(text: str) -> frozenset[str]:
    """Return the whitespace-separated words of a table literal."""
    return frozenset(text.split())


def _rule_table(text: str) -> dict[str, str]:
    """Parse ``rule: name name...`` lines (indented lines continue the rule above)."""
    table: dict[str, str] = {}
    rule = ""
    for line in text.strip("\n").splitlines():
        if not line[:1].isspace():
            rule, _, line = line.partition(":")
        table |= dict.fromkeys(line.split(), rule)
    return table


#: Qualified-name prefixes (``*``: any continuation) -> rule; the longest match wins.
NAME_RULES = _rule_table("""
native-code: ctypes _ctypes cffi mmap cppyy torch.ops.load_library torch.classes.load_library
    torch.utils.cpp_extension.load torch.utils.cpp_extension.CppExtension torch.cuda.cudart
    torch.utils.cpp_extension.CUDAExtension torch.utils.cpp_extension.BuildExtension
    os.system os.popen os.exec* os.spawn* os.posix_spawn*
concurrency: threading _thread multiprocessing concurrent asyncio os.fork os.forkpty os.kill
    os.killpg os.register_at_fork subprocess signal sched atexit queue torch.multiprocessing
    torch.distributed
introspection: inspect gc sys._getframe sys._current_frames sys.modules sys.settrace
    sys.setprofile sys.gettrace sys.getprofile sys.addaudithook sys.meta_path sys.path_hooks
    threading.settrace threading.setprofile threading.settrace_all_threads traceback.walk_stack
    traceback.walk_tb traceback.extract_stack traceback.format_stack traceback.print_stack
    traceback.StackSummary builtins.globals builtins.locals builtins.vars builtins.breakpoint
    importlib pkgutil site weakref __main__ dis
dynamic-code: builtins.exec builtins.eval builtins.compile builtins.__import__ importlib.util
    importlib.import_module importlib.__import__ importlib.machinery types.FunctionType
    types.CodeType types.LambdaType types.ModuleType marshal pickle _pickle dill cloudpickle
    runpy codecs code codeop zipimport
file-io: builtins.open io.open io.FileIO os.open os.putenv os.unsetenv os.remove os.unlink
    os.rename os.replace os.mkdir os.makedirs os.rmdir os.removedirs os.listdir os.scandir
    os.walk os.chdir os.link os.symlink os.truncate os.write os.read os.fdopen os.mkfifo shutil
    tempfile socket ssl urllib http requests httpx aiohttp ftplib smtplib glob fileinput sqlite3
    shelve dbm zipfile tarfile filelock pickle.dump torch.save torch.load torch.hub numpy.save*
    numpy.load numpy.fromfile numpy.memmap json.dump json.load
vendor-library: flash_attn flash_attn_interface flash_mla xformers vllm sgl_kernel sglang
    flashinfer apex transformer_engine deep_gemm deep_ep cutlass cuda cupy pycuda bitsandbytes
    liger_kernel triton.ops triton_kernels aiter tilelang thunderkittens quack cublas cudnn
    nvidia numba jax jaxlib tensorflow torchao fbgemm_gpu mamba_ssm causal_conv1d tensorrt
    torch_tensorrt nvmath deepspeed kernels
torch-compile: torch.compile torch.compiler torch.jit torch._dynamo torch._inductor torch.fx
    torch.export torch._export torch._functorch functorch torch._lazy torch._higher_order_ops
    torch.cuda.jiterator
stream: torch.cuda.Stream torch.cuda.stream torch.cuda.set_stream torch.cuda.ExternalStream
    torch.cuda.StreamContext torch.cuda.streams torch.cuda.Event torch.cuda.synchronize
    torch.Stream torch.Event torch.accelerator.set_stream torch.accelerator.synchronize
    torch._C._cuda_setStream torch._C._cuda_synchronize
cuda-graph: torch.cuda.graph torch.cuda.graphs torch.cuda.CUDAGraph torch.cuda.graph_pool_handle
    torch.cuda.make_graphed_callables torch.cuda.is_current_stream_capturing
    triton.testing.do_bench_cudagraph
precision-mode: torch.set_float32_matmul_precision torch.set_default_dtype torch.autocast
    torch.set_default_tensor_type torch.set_flush_denormal torch.set_autocast* torch.amp
    torch.cuda.amp torch.cpu.amp
monkeypatch: unittest.mock mock
mutable-cache: functools.cache functools.lru_cache functools.cached_property cachetools
""")
#: Attribute names that are findings on any object.
ATTR_RULES = _rule_table("""
introspection: f_back f_locals f_globals f_code f_builtins f_trace tb_frame tb_next gi_frame
    gi_code cr_frame cr_code ag_frame __globals__ __closure__ __code__ __subclasses__ __mro__
    __bases__ __builtins__ __defaults__ __kwdefaults__ __dict__ __getattribute__ __doc__
stream: wait_stream record_stream wait_event record_event synchronize elapsed_time
file-io: read_text read_bytes write_text write_bytes
""")
#: Modules that are findings when imported (as well as the name rules above).
IMPORT_RULES = {"builtins": "introspection"}
#: torch functions and values that only allocate, describe or launch.
TORCH_ALLOWED = words("""
    empty empty_like empty_strided zeros zeros_like ones ones_like full full_like tensor
    as_strided device Size dtype finfo iinfo is_tensor get_default_dtype is_floating_point
    is_complex numel result_type promote_types can_cast broadcast_shapes no_grad inference_mode
    enable_grad set_grad_enabled is_grad_enabled is_inference_mode_enabled Tensor Generator
    layout memory_format strided contiguous_format channels_last inf nan pi e newaxis version
    __version__ Stream Event
""")
#: torch submodules whose members never compute (streams and graphs have their own rules).
TORCH_ALLOWED_SUBMODULES = words("cuda library utils backends version types nn accelerator")
TORCH_DTYPES = words("""
    float float16 float32 float64 half double bfloat16 long int int8 int16 int32 int64 uint8
    uint16 uint32 uint64 bool short complex32 complex64 complex128 cfloat cdouble chalf
    float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz float8_e8m0fnu float4_e2m1fn_x2
    qint8 quint8 qint32
""")
#: torch.ops namespaces that are torch's own library math (not a vendor's).
TORCH_OWN_OPS = words("aten prims _refs quantized")
#: Tensor methods that only view, describe or launch (a known tensor may call nothing else).
TENSOR_ALLOWED = words("""
    view view_as reshape reshape_as flatten unflatten contiguous stride size numel nelement dim
    ndimension element_size data_ptr is_contiguous t transpose permute movedim moveaxis swapaxes
    swapdims unsqueeze squeeze expand expand_as narrow select split split_with_sizes
    tensor_split chunk unbind unfold diagonal as_strided __getitem__ __len__ new_empty
    new_empty_strided new_zeros new_full new_ones new_tensor zero_ fill_ detach storage_offset
    untyped_storage get_device is_floating_point is_complex item requires_grad_ dim_order
""")
#: Tensor methods that a receiver the screen cannot type is still assumed to call as math.
TENSOR_MATH = words("""
    float half bfloat16 double int long short bool byte char type type_as to cuda clone copy_
    sum nansum mean nanmean prod exp exp_ exp2 expm1 log log_ log2 log10 log1p sqrt sqrt_ rsqrt
    rsqrt_ pow pow_ square mul mul_ add add_ sub sub_ div div_ true_divide floor_divide
    remainder fmod neg neg_ abs abs_ reciprocal reciprocal_ matmul mm bmm mv addmm addmm_
    baddbmm baddbmm_ addbmm addmv addr einsum softmax log_softmax max min amax amin aminmax
    argmax argmin norm var std logsumexp sigmoid sigmoid_ tanh tanh_ relu relu_ gelu silu clamp
    clamp_ clip clip_ clamp_min clamp_max sin cos erf cumsum cumprod cummax topk sort argsort
    masked_fill masked_fill_ masked_scatter where scatter scatter_ scatter_add scatter_add_
    scatter_reduce index_add index_add_ index_copy index_copy_ index_fill index_put index_put_
    index_select gather take maximum minimum lerp lerp_ addcmul addcdiv outer dot round floor
    ceil trunc sign repeat repeat_interleave tile roll flip triu tril diff all any nonzero
    count_nonzero bincount histc unique mode median quantile kthvalue eq ne lt le gt ge
    logical_and logical_or logical_not bitwise_and bitwise_or bitwise_xor fill_diagonal_
    normal_ uniform_ random_ bernoulli_ exponential_ apply_ map_
""")
DUNDER_MATH = frozenset(
    f"__{p}{op}__"
    for op in words("add sub mul matmul truediv floordiv mod pow and or xor lshift rshift")
    for p in ("", "r", "i")
) | words("__neg__ __pos__ __abs__ __invert__ __lt__ __le__ __gt__ __ge__ __eq__ __ne__")
MODULE_LIKE = words("""
    torch torch.nn torch.nn.functional torch.ops torch._C torch._C._nn torch.linalg torch.fft
    torch.special torch.cuda torch.backends torch.library torch.utils torch.nn.init
""")
#: Tensor methods that return something other than a tensor.
TENSOR_META = words("""
    size stride numel nelement dim ndimension element_size data_ptr is_contiguous item tolist
    get_device storage_offset is_floating_point is_complex untyped_storage __len__ dim_order
    numpy tobytes
""")
PARAMETER_CLASSES = words("""
    torch.nn.Parameter torch.nn.parameter.Parameter torch.nn.Buffer torch.nn.parameter.Buffer
""")
#: torch members that do not return a new tensor.
TORCH_NOT_TENSOR = words("""
    device dtype finfo iinfo Size Generator Stream Event numel result_type promote_types
    can_cast broadcast_shapes no_grad inference_mode enable_grad compile layout memory_format
    version __version__ library jit autograd testing distributed compiler fx export amp
    autocast profiler manual_seed random
""")
#: torch names that are math even when read without a call (passed as a function).
VALUE_PREFIXES = (
    "torch.nn.functional.",
    "torch.ops.",
    "torch.Tensor.",
    "torch.special.",
    "torch.linalg.",
    "torch.fft.",
)

#: Methods that mutate a container in place.
MUTATORS = words("""
    append extend insert add update setdefault pop popitem clear remove discard appendleft
    extendleft __setitem__ __delitem__
""")
#: Calls that make a mutable container.
CONTAINER_CALLS = words("""
    builtins.dict builtins.list builtins.set builtins.bytearray collections.defaultdict
    collections.OrderedDict collections.deque collections.Counter collections.ChainMap
    weakref.WeakValueDictionary weakref.WeakKeyDictionary
""")
#: torch.nn members that are no layer (``Sequential`` only when given no layers).
NN_ALLOWED = words("""
    Module Parameter Buffer ModuleList ModuleDict ParameterList ParameterDict Sequential
    functional parameter
""")
#: Module names that are the reference or its inputs.
REFERENCE_MODULES = frozenset({"reference", "_aka_reference", "_aka_inputs", "input", "inputs"})
#: ATen/torch calls and tensor math methods in C++ sources, and the ATen calls that only allocate.
CPP_TORCH_CALL = re.compile(r"\b(?:torch|at)(?:::native|::_ops)?::(\w+)\s*\(")
CPP_METHOD_CALL = re.compile(
    r"\.(sum|mean|prod|exp|log|sqrt|rsqrt|matmul|mm|bmm|addmm|softmax|log_softmax|sigmoid|tanh|"
    r"relu|gelu|silu|norm|var|std|cumsum|topk|sort|mul|div|sub|add|to|clone|copy_)\s*\("
)
CPP_ALLOWED = words("""
    empty empty_like empty_strided zeros zeros_like full full_like from_blob Tensor
    TensorOptions Device device dtype
""")
#: rule -> (pattern, what) for tokens of C++ sources.
CPP_TOKENS: dict[str, tuple[re.Pattern[str], str]] = {
    "stream": (
        re.compile(
            r"\b(cudaStreamCreate\w*|cuStreamCreate\w*|cudaDeviceSynchronize|"
            r"cudaStreamSynchronize|cudaEventCreate\w*|cudaEventRecord|cudaEventSynchronize|"
            r"cudaStreamWaitEvent|getStreamFromPool|setCurrentCUDAStream|CUDAStreamGuard)\b"
        ),
        "C++ source uses CUDA streams, events or synchronization",
    ),
    "cuda-graph": (
        re.compile(r"\b(cudaStreamBeginCapture\w*|cudaGraph\w*|cuGraph\w*|CUDAGraph)\b"),
        "C++ source captures or launches a CUDA graph",
    ),
    "vendor-library": (
        re.compile(r"\b(cublas\w*|cublasLt\w*|cudnn\w*|cutlass[:/]|cute::|<cute/|flashinfer)"),
        "C++ source uses a vendor kernel library",
    ),
    "native-code": (re.compile(r"\bdlopen\b|\bdlsym\b"), "C++ source loads native code"),
}
#: A ``torch.ops`` namespace that a C++ source registers.
TORCH_LIBRARY = re.compile(r"TORCH_LIBRARY(?:_FRAGMENT|_IMPL)?\s*\(\s*(\w+)")


def name_rule(q: str) -> str | None:
    """Return the rule of the longest table prefix of a qualified name."""
    best, best_len = None, -1
    for prefix, rule in NAME_RULES.items():
        if prefix.endswith("*"):
            hit = q.startswith(prefix[:-1])
        else:
            hit = q == prefix or q.startswith(prefix + ".")
        if hit and len(prefix) > best_len:
            best, best_len = rule, len(prefix)
    return best


def torch_computes(q: str, own_ops: set[str]) -> bool:
    """Return whether the torch name ``q`` computes (used on the hot path)."""
    if not q.startswith("torch.") or q in MODULE_LIKE:
        return False
    parts = q.split(".")[1:]
    if parts[0] == "ops":
        return len(parts) > 2 and parts[1] in TORCH_OWN_OPS
    if parts[0] == "Tensor" and len(parts) > 1:
        return parts[1] not in TENSOR_ALLOWED
    if parts[:2] == ["nn", "functional"]:
        return True
    if parts[0] in ("_C", "special", "linalg", "fft", "_refs", "_prims", "sparse", "nested"):
        return True
    return not (
        parts[0] in TORCH_ALLOWED
        or parts[0] in TORCH_ALLOWED_SUBMODULES
        or parts[0] in TORCH_DTYPES
    )


def is_value_name(q: str) -> bool:
    """Return whether a torch name read without a call is a value (dtype, constant), not math."""
    return not (q.startswith(VALUE_PREFIXES) or q.split(".")[-1] in TENSOR_MATH)
