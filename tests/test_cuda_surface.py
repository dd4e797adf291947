"""torch.tpu has torch.cuda's public names, except the ones below, each left
out on purpose with its reason. A name PyTorch adds to torch.cuda in a new
release fails this test until it is either provided or listed here."""
import types

import torch

_IMPORT = "an import inside torch/cuda/__init__.py, not part of its API"
_LEGACY_TYPE = "legacy typed constructor (torch.cuda.FloatTensor and kin), deprecated: use torch.tensor(..., device='tpu')"
_NVIDIA_QUERY = "NVML/AMD SMI reading of a physical GPU's sensors; the virtual chip has none"
_CUDA_RUNTIME = "CUDA runtime API (cudart, its error codes and status)"
_GRAPHS = "no graph capture on tpu yet; replayable programs are planned through torch.compile(backend='tpu')"
_ALLOCATOR_SWAP = "replacing or pooling the caching allocator (pluggable allocators, memory pools) is not supported yet"

LEFT_OUT = {
    # imports of torch.cuda's own module
    **{name: _IMPORT for name in (
        "Any", "Callable", "NewType", "Optional", "TYPE_CHECKING", "cast", "classproperty", "importlib",
        "lru_cache", "os", "platform", "threading", "torch", "traceback", "warnings")},
    **{f"{kind}{suffix}": _LEGACY_TYPE for kind in (
        "BFloat16", "Bool", "Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short")
       for suffix in ("Storage", "Tensor")},
    "ComplexDoubleStorage": _LEGACY_TYPE,
    "ComplexFloatStorage": _LEGACY_TYPE,
    "sparse": "legacy sparse typed constructors of CUDA",
    # CUDA and NVIDIA only
    "CudaError": _CUDA_RUNTIME, "DeferredCudaCallError": _CUDA_RUNTIME, "check_error": _CUDA_RUNTIME,
    "cudaStatus": _CUDA_RUNTIME, "cudart": _CUDA_RUNTIME,
    "AcceleratorError": "kernel errors raise the exception type PyTorch's CPU kernel raises (IndexError, "
                        "RuntimeError, ...), naming the op, at the next sync point",
    "DEVICE_REQUIREMENT": "table of CUDA compute capabilities per PyTorch release",
    "PYTORCH_RELEASES_CODE_CC": "table of CUDA compute capabilities per PyTorch release",
    "get_arch_list": "CUDA architectures the build was compiled for",
    "get_gencode_flags": "CUDA architectures the build was compiled for",
    "has_half": "CUDA build flag", "has_magma": "CUDA build flag (MAGMA linear algebra)",
    "is_tf32_supported": "TF32 is NVIDIA's matmul format; tpu follows torch.set_float32_matmul_precision "
                         "with bf16 passes",
    "current_blas_handle": "cuBLAS handle", "current_solver_handle": "cuSOLVER handle",
    "tunable": "TunableOp chooses among cuBLAS/hipBLASLt GEMM implementations",
    "jiterator": "compiles CUDA C at run time (NVRTC)",
    "nvtx": "NVIDIA Tools Extension ranges: use torch.profiler.record_function",
    "profiler": "cudaProfilerStart/Stop for NVIDIA's Nsight tools",
    "nccl": "NVIDIA's collective library; distributed tpu goes through torch.distributed",
    "gds": "NVIDIA GPUDirect Storage",
    "GreenContext": "CUDA green contexts (partitions of a GPU's SMs)",
    "green_contexts": "CUDA green contexts (partitions of a GPU's SMs)",
    "ExternalStream": "wraps a stream handle made by another CUDA library; tpu streams have no foreign handles",
    "get_stream_from_external": "wraps a stream handle made by another CUDA library",
    "ipc_collect": "CUDA IPC memory; tpu tensors cannot be shared between processes (torch_tpu/_multiprocessing.py)",
    "clock_rate": _NVIDIA_QUERY, "power_draw": _NVIDIA_QUERY, "temperature": _NVIDIA_QUERY,
    "utilization": _NVIDIA_QUERY, "memory_usage": _NVIDIA_QUERY, "list_gpu_processes": _NVIDIA_QUERY,
    "amp": "torch.cuda.amp is a deprecated alias module: use torch.autocast('tpu') and torch.amp.GradScaler('tpu')",
    # not built yet
    "CUDAGraph": _GRAPHS, "graph": _GRAPHS, "graphs": _GRAPHS, "graph_pool_handle": _GRAPHS,
    "make_graphed_callables": _GRAPHS,
    "CUDAPluggableAllocator": _ALLOCATOR_SWAP, "change_current_allocator": _ALLOCATOR_SWAP,
    "MemPool": _ALLOCATOR_SWAP, "use_mem_pool": _ALLOCATOR_SWAP,
}


def _public(module: types.ModuleType) -> set[str]:
    return {name for name in dir(module) if not name.startswith("_")}


def test_tpu_has_cuda_names_except_those_left_out_on_purpose():
    missing = _public(torch.cuda) - _public(torch.tpu) - set(LEFT_OUT)
    assert not missing, f"torch.cuda names torch.tpu lacks, neither provided nor listed in LEFT_OUT: {sorted(missing)}"


def test_left_out_list_is_current():
    provided = set(LEFT_OUT) & _public(torch.tpu)
    assert not provided, f"listed as left out but torch.tpu has them now: {sorted(provided)}"
    gone = set(LEFT_OUT) - _public(torch.cuda)
    assert not gone, f"listed as left out but torch.cuda no longer has them: {sorted(gone)}"


def test_shared_names_are_the_same_kind_of_object():
    # A name torch.tpu shares with torch.cuda is callable where CUDA's is, a
    # class where CUDA's is, and a module where CUDA's is.
    for name in _public(torch.cuda) & _public(torch.tpu):
        cuda, tpu = getattr(torch.cuda, name), getattr(torch.tpu, name)
        assert isinstance(tpu, types.ModuleType) == isinstance(cuda, types.ModuleType), name
        assert isinstance(tpu, type) == isinstance(cuda, type), name
        assert callable(tpu) == callable(cuda), name
