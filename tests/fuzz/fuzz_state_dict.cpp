// libFuzzer target: the two readers of named-tensor files (src/nn/state_dict): load_tensors (the
// checkpoint envelope holding a state dict, what `gpt train --resume` and `gpt sample` read) and
// import_safetensors, on any bytes (written to a file in /dev/shm, since both read a path). A
// refusal is a tapegrad::Error; a crash, a sanitizer report or any other exception is a finding.
// What one of them reads, written back and read again, must give the same names, dtypes, shapes
// and bytes.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "tapegrad/io/atomic_file.hpp"
#include "tapegrad/nn/state_dict.hpp"
#include "tapegrad/tensor/error.hpp"

namespace {

using tapegrad::nn::StateDict;

const std::string& scratch(const char* what) {  // one file per process and reader
  static std::string paths[2] = {"/dev/shm/tg_fuzz_sd_" + std::to_string(getpid()) + "_a",
                                 "/dev/shm/tg_fuzz_sd_" + std::to_string(getpid()) + "_b"};
  return paths[what[0] == 'b'];
}

bool same(const StateDict& a, const StateDict& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const tapegrad::Tensor &x = a[i].second, &y = b[i].second;
    if (a[i].first != b[i].first || x.dtype() != y.dtype() || !(x.shape() == y.shape())) return false;
    const size_t bytes = static_cast<size_t>(x.numel()) * tapegrad::dtype_size(x.dtype());
    if (bytes && std::memcmp(x.raw_data(), y.raw_data(), bytes) != 0) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const std::string& in = scratch("a");
  const std::string& out = scratch("b");
  tapegrad::io::write_file_atomic(in, bytes);
  try {
    tapegrad::nn::StateDictFile info;
    const StateDict t = tapegrad::nn::load_tensors(in, &info);
    tapegrad::nn::save_tensors(out, t, info);
    tapegrad::nn::StateDictFile again;
    if (!same(t, tapegrad::nn::load_tensors(out, &again)) || again.step != info.step || again.learner != info.learner)
      __builtin_trap();
  } catch (const tapegrad::Error&) {
  }
  try {
    const StateDict t = tapegrad::nn::import_safetensors(in);
    tapegrad::nn::export_safetensors(out, t);
    if (!same(t, tapegrad::nn::import_safetensors(out))) __builtin_trap();
  } catch (const tapegrad::Error&) {
  }
  return 0;
}
