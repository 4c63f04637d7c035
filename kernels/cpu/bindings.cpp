// The Python module of the CPU kernels (kernels.h): the only source that includes torch's bindings.
#include <torch/csrc/utils/pybind.h>

#include "kernels.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &treespec::pack, "W [K, N] -> panels [N / 32, K, 32]");
  m.def("matmul", &treespec::matmul, "x [M, K] @ panels (int8 ones with their column scales) -> y [M, N]",
        pybind11::arg("x"), pybind11::arg("panels"), pybind11::arg("scales") = pybind11::none());
  m.def("matmul_blocks", &treespec::matmul_blocks, "x [M, K] @ block weights q * d + m -> y [M, N]");
  m.def("attend", &treespec::attend, "rows of each sequence attended over the paged KV cache");
  m.def("prefill_attend", &treespec::prefill_attend, "prefill chunks' causal rows over the paged KV cache");
  m.def("rms_norm", &treespec::rms_norm, "x [T, H] RMS-normalised per row, times weight [H]");
  m.def("rope", &treespec::rope, "x [T, heads, D] rotated by cos and sin [T, D]");
  m.def("silu_mul", &treespec::silu_mul, "gate_up [T, 2I] -> silu(gate) * up [T, I]");
  m.def("decode_layers", &treespec::decode_layers, "a run of decoder layers for a decode or verify step");
}
