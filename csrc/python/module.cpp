// torch_tpu._C: the few runtime facts torch.tpu needs that PyTorch's own
// device-generic bindings (torch.accelerator, torch.Stream, torch.Event)
// do not already reach through the guard, hooks and allocator.
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include "core/fallback.h"
#include "core/generator.h"
#include "core/glue.h"
#include "python/memory.h"
#include "python/signal.h"

extern "C" {
#include "tpu/probe.h"
}

namespace torch_tpu {
namespace {

// Every blocking wait of the runtime releases the GIL if the waiting
// thread holds it (see tpu_runtime_set_wait_hooks): a wait then never
// deadlocks against a thread that needs the GIL, and other Python threads
// run meanwhile, as with CUDA's blocking calls. Not while the interpreter
// shuts down, when a thread that gives the GIL up may not get it back.
void* release_gil_for_wait() {
  if (!Py_IsInitialized() || _Py_IsFinalizing() || !PyGILState_Check()) return nullptr;
  return PyEval_SaveThread();
}

void reacquire_gil_after_wait(void* state) {
  if (state) PyEval_RestoreThread(static_cast<PyThreadState*>(state));
}

// A chip index from Python, checked before it is narrowed to PyTorch's
// 8-bit DeviceIndex (so 257 is an error, not chip 1).
c10::DeviceIndex chip_arg(int64_t index, const char* what) {
  check_chip_index(index, what);
  return static_cast<c10::DeviceIndex>(index);
}

py::dict device_properties(c10::DeviceIndex index) {
  tpu_chip_props p{};
  TPU_CHECK_STATUS(tpu_chip_get_props(index, &p));
  static const char* generations[] = {"v5e", "v5p", "v6e", "v7x"};
  static_assert(sizeof generations / sizeof generations[0] == TPU_GEN_COUNT, "one name per generation");
  py::dict d;
  d["name"] = std::string(p.name);
  d["generation"] = std::string(generations[p.generation]);
  d["total_memory"] = p.total_memory;
  d["hbm_bytes"] = p.hbm_bytes;
  d["hbm_bandwidth"] = p.hbm_bandwidth;
  d["peak_bf16_flops"] = p.peak_bf16_flops;
  d["mxu_size"] = p.mxu_size;
  d["chip_count"] = p.chip_count;
  return d;
}

void set_mode(const std::string& name) {
  for (int m = 0; m < TPU_MODE_COUNT; m++) {
    if (name == tpu_mode_name(static_cast<tpu_mode>(m))) {
      TPU_CHECK_STATUS(tpu_mode_set(static_cast<tpu_mode>(m)));
      return;
    }
  }
  TORCH_CHECK_VALUE(false, "set_mode: unknown mode '", name, "' (expected 'strict', 'debug' or 'fused')");
}

// The machine's limits (tpu/probe.h) for benchmarks/suite.py: a dict of
// GFLOP/s and GB/s on `threads` threads; the probes run without the GIL.
py::dict probe_machine(int threads, double seconds, int64_t stream_bytes) {
  double fma = 0, bf16 = 0, triad = 0;
  {
    py::gil_scoped_release no_gil;
    TPU_CHECK_STATUS(tpu_probe_fma_f32(threads, seconds, &fma));
    TPU_CHECK_STATUS(tpu_probe_dot_bf16(threads, seconds, &bf16));
    TPU_CHECK_STATUS(tpu_probe_stream_triad(threads, static_cast<size_t>(stream_bytes), seconds, &triad));
  }
  py::dict d;
  d["fma_f32_gflops"] = fma;
  d["dot_bf16_gflops"] = bf16;
  d["triad_gbps"] = triad;
  return d;
}

// A CPU tensor over a tpu tensor's device memory (which lives in host
// memory), with its sizes and strides: torch_tpu.distributed hands these
// to gloo (_views.host_view). The view's storage keeps the tpu storage
// alive through a C++ reference, so whichever thread frees the view last
// (a gloo worker, often) needs no GIL: a storage made by frombuffer takes
// the GIL in its deleter, and a gloo thread that takes the GIL while the
// interpreter finalizes aborts the process.
at::Tensor host_view(const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.device().type() == c10::DeviceType::PrivateUse1, "_host_view: expected a tpu tensor, got ",
                    t.device());
  check_in_storage(t, "_host_view");  // a view left over a shrunk storage reads no freed memory
  auto* keep = new c10::Storage(t.storage());
  return at::from_blob(
      t.data_ptr(), t.sizes(), t.strides(), [keep](void*) { delete keep; }, t.options().device(c10::kCPU));
}

}  // namespace
}  // namespace torch_tpu

PYBIND11_MODULE(_C, m) {
  using namespace torch_tpu;
  m.doc() = "torch-tpu runtime bindings";
  tpu_runtime_set_wait_hooks(&release_gil_for_wait, &reacquire_gil_after_wait);
  m.def("_init", &ensure_runtime);
  m.def("_device_count", []() { return static_cast<int>(chip_count()); });
  m.def("_is_in_bad_fork", []() { return tpu_runtime_is_forked(); });
  m.def("_current_device", []() { return static_cast<int>(current_chip()); });
  m.def("_check_device_index", [](int64_t index) { check_chip_index(index, "device"); });
  m.def("_set_device", [](int64_t index) { set_current_chip(chip_arg(index, "set_device")); });
  m.def("_get_device_properties",
        [](int64_t index) { return device_properties(chip_arg(index, "get_device_properties")); });
  m.def("_synchronize", [](int64_t index) {
    const c10::DeviceIndex chip = chip_arg(index, "synchronize");
    py::gil_scoped_release no_gil;
    TPU_CHECK_STATUS(tpu_chip_synchronize(chip));
  });
  m.def("_set_mode", &set_mode);
  m.def("_get_mode", []() { return std::string(tpu_mode_name(tpu_mode_get())); });
  m.def("_num_threads", []() { return tpu_pool_num_threads(); });
  m.def("_probe_machine", &probe_machine);
  m.def("_fallback_stats", []() {
    py::dict d;
    for (const auto& [name, calls] : fallback_stats()) d[py::str(name)] = calls;
    return d;
  });
  m.def("_reset_fallback_stats", &reset_fallback_stats);
  m.def("_fusion_stats", []() {
    tpu_fusion_stats st;
    tpu_fusion_get_stats(&st);
    py::dict d;
    d["groups"] = st.groups;
    d["fused_records"] = st.fused_records;
    d["values_not_written"] = st.values_not_written;
    d["bytes_not_written"] = st.bytes_not_written;
    return d;
  });
  m.def("_reset_fusion_stats", []() { tpu_fusion_reset_stats(); });
  m.def("_set_fallback_error", &set_fallback_error);
  m.def("_get_fallback_error", &fallback_error);
  init_memory_bindings(m);
  init_signal_bindings(m);
  m.def("_host_view", &host_view);
  m.def("_default_generator", [](int64_t index) {
    const at::Generator& gen = default_generator(chip_arg(index, "default_generators"));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(gen));
  });
}
