// torch_tpu._C's memory and sync-debug bindings (memory.cpp).
#pragma once

#include <torch/extension.h>

namespace torch_tpu {

// Adds the _memory_*, _host_memory_*, _*_memory_fraction and
// _*_sync_debug_mode functions to the module.
void init_memory_bindings(pybind11::module_& m);

}  // namespace torch_tpu
