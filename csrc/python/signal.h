// torch_tpu._C's host-signal binding (signal.cpp).
#pragma once

#include <torch/extension.h>

namespace torch_tpu {

// Adds the _Signal class (tpu/signal.h) to the module.
void init_signal_bindings(pybind11::module_& m);

}  // namespace torch_tpu
