// The Python module of the CPU kernels (kernels.h): the only source that includes torch's bindings.
#include <torch/csrc/utils/pybind.h>

#include "kernels.h"

// The kernels that run for milliseconds (a forward's matmuls, attention, a decode step's layers, an EAGLE head's pass) let go
// of Python's GIL while they run, as torch's own ops do: the process's other threads (the verifier's
// gRPC loop that streams the outputs and takes new requests) run meanwhile instead of waiting for the
// whole call. They touch no Python object; pybind converts the arguments before and the result after.
using ReleaseGil = pybind11::call_guard<pybind11::gil_scoped_release>;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &treespec::pack, "W [K, N] -> panels [N / 32, K, 32]");
  m.def("matmul", &treespec::matmul, "x [M, K] @ panels (int8 ones with their column scales) -> y [M, N]",
        pybind11::arg("x"), pybind11::arg("panels"), pybind11::arg("scales") = pybind11::none(),
        ReleaseGil());
  m.def("matmul_blocks", &treespec::matmul_blocks, "x [M, K] @ block weights q * d + m -> y [M, N]",
        ReleaseGil());
  m.def("attend", &treespec::attend, "rows of each sequence attended over the paged KV cache", ReleaseGil());
  m.def("prefill_attend", &treespec::prefill_attend, "prefill chunks' causal rows over the paged KV cache",
        ReleaseGil());
  m.def("rms_norm", &treespec::rms_norm, "x [T, H] RMS-normalised per row, times weight [H]");
  m.def("rope", &treespec::rope, "x [T, heads, D] rotated by cos and sin [T, D]");
  m.def("silu_mul", &treespec::silu_mul, "gate_up [T, 2I] -> silu(gate) * up [T, I]");
  m.def("top_logprobs", &treespec::top_logprobs, "each row's k largest log-probabilities and their indices");
  m.def("decode_layers", &treespec::decode_layers, "a run of decoder layers for a decode or verify step",
        ReleaseGil());
  m.def("eagle_pass", &treespec::eagle_pass, "one pass of an EAGLE head's layer over a drafting level's rows",
        ReleaseGil());
}
