// CUDA matrix kernels and reductions: matmul (cuBLAS, batched), matmul_fsum (an exact kernel),
// transpose, add_row, column sums, full sums and means.
//
// Rules: every f64 sum but matmul's is correctly rounded (ExactSum, one thread per output value),
// so those f64 results, matmul_fsum's included, equal the CPU's bit for bit. f32 column sums
// accumulate in double down the rows, as the CPU does, and give its bits; f32 full sums use one
// block with a fixed tree over per-thread double sums: deterministic, within one double rounding of
// the CPU's sum before the final rounding to f32. matmul is cuBLAS (strided-batched GEMMs of the
// plan in src/kernels/matmul_plan.hpp): FP64 compute for f64, FP32 for f32 (TF32 only after
// set_allow_tf32(true)) and for bf16 operands into f32 (tensor cores); its sums are cuBLAS's, close
// to the CPU's BLAS but not its bits.
#include <cuda_bf16.h>
#include <dlfcn.h>

#include <atomic>
#include <string>

#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/cuda_kernels.hpp"
#include "tapegrad/cuda/exact_sum.cuh"
#include "tapegrad/kernels/matmul_plan.hpp"

namespace tapegrad::cuda {

namespace {
std::atomic<bool> g_allow_tf32{false};
}

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

// ----------------------------------------------------------------------------
// CUDA kernels

// out (n, m) = op(a) @ op(b), f64, one thread per cell: the products rounded to double, then one
// correctly rounded sum over p (the CPU's exact_sum of the same products). a is (n, k) or, with
// ta, (k, n); b is (k, m) or, with tb, (m, k).
__global__ void matmul_fsum_kernel(const double* a, bool ta, const double* b, bool tb, double* out, int64_t n,
                                  int64_t m, int64_t k, int64_t lda, int64_t ldb, ErrorSite site) {
  for (int64_t cell = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; cell < n * m;
       cell += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = cell / m, j = cell % m;
    ExactSum acc;
    for (int64_t p = 0; p < k; ++p) {
      const double aip = ta ? a[p * lda + i] : a[i * lda + p];
      const double bpj = tb ? b[j * ldb + p] : b[p * ldb + j];
      acc.add(aip * bpj);
    }
    if (acc.out_of_partials) record_error(site, ErrorKind::sum_out_of_partials, cell, ExactSum::kPartials);
    out[cell] = acc.result();
  }
}

// out (m, n) = x (n, m)^T
template <class T>
__global__ void transpose_kernel(const T* x, T* out, int64_t n, int64_t m) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n * m; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / m, j = e % m;
    out[j * n + i] = x[e];
  }
}

// out (n, m) = x (n, m) + b (m,) on every row
template <class T>
__global__ void add_row_kernel(const T* x, const T* b, T* out, int64_t n, int64_t m) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n * m; e += int64_t{gridDim.x} * blockDim.x)
    out[e] = x[e] + b[e % m];
}

// out (m,) = column sums of x (n, m); one thread per column walks the rows in order.
template <class T>
__global__ void sum_rows_kernel(const T* x, T* out, int64_t n, int64_t m, ErrorSite site) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < m; j += int64_t{gridDim.x} * blockDim.x) {
    if constexpr (std::is_same_v<T, double>) {
      ExactSum acc;
      for (int64_t i = 0; i < n; ++i) acc.add(x[i * m + j]);
      if (acc.out_of_partials) record_error(site, ErrorKind::sum_out_of_partials, j, ExactSum::kPartials);
      out[j] = acc.result();
    } else {
      double acc = 0.0;
      for (int64_t i = 0; i < n; ++i) acc += x[i * m + j];
      out[j] = static_cast<T>(acc);
    }
  }
}

// out () = sum(x (n,)) / divisor (1 for sum, n for mean), f64: one thread, correctly rounded.
__global__ void sum_all_f64_kernel(const double* x, double* out, int64_t n, double divisor, ErrorSite site) {
  ExactSum acc;
  for (int64_t i = 0; i < n; ++i) acc.add(x[i]);
  if (acc.out_of_partials) record_error(site, ErrorKind::sum_out_of_partials, 0, ExactSum::kPartials);
  out[0] = acc.result() / divisor;
}

// out () = sum(x (n,)) / divisor, f32: one block of kSumSlots threads, fixed_order_sum's order.
__global__ void sum_all_f32_kernel(const float* x, float* out, int64_t n, float divisor) {
  __shared__ double slots[kSumSlots];
  const double total = fixed_order_sum(x, n, slots);
  if (threadIdx.x == 0) out[0] = static_cast<float>(total) / divisor;
}

// ----------------------------------------------------------------------------
// kernel launchers

// Note [cuBLAS on demand]
// cuBLAS is not linked: linked, libcublasLt's static initializers fault in pages at the start of
// every process, before main, CPU runs included, and for a short CPU run that start-up is most of
// its time (docs/cuda.md, "Measurements behind the source comments"). It is loaded with dlopen, by
// its soname for the major version built against, the first time a CUDA matmul needs a handle;
// only the entry points below are used.
namespace {

// A library of the CUDA toolkit by its soname for the major version built against, and its
// entry points by name; a DeviceError naming what is missing.
struct Library {
  std::string name;
  void* handle;
  Library(const char* stem, const char* purpose) : name(std::string(stem) + std::to_string(CUBLAS_VER_MAJOR)) {
    handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) throw DeviceError("[cuda] cannot load " + name + " for " + purpose + ": " + dlerror());
  }
  template <class F>
  void symbol(F& slot, const char* symbol_name) const {
    slot = reinterpret_cast<F>(dlsym(handle, symbol_name));
    if (!slot) throw DeviceError("[cuda] " + name + " has no " + symbol_name);
  }
};

}  // namespace

const CublasApi& cublas_api() {
  static const CublasApi api = [] {
    const Library lib("libcublas.so.", "CUDA matmuls");
    CublasApi a{};
    lib.symbol(a.create, "cublasCreate_v2");
    lib.symbol(a.set_stream, "cublasSetStream_v2");
    lib.symbol(a.set_workspace, "cublasSetWorkspace_v2");
    lib.symbol(a.gemm_ex, "cublasGemmEx");
    lib.symbol(a.status_name, "cublasGetStatusName");
    lib.symbol(a.status_string, "cublasGetStatusString");
    lib.symbol(a.gemm_strided_batched_ex, "cublasGemmStridedBatchedEx");
    return a;
  }();
  return api;
}

// cuBLASLt, loaded the same way (libcublas has loaded it already: its GEMMs run through it).
const CublasLtApi& cublaslt_api() {
  static const CublasLtApi api = [] {
    const Library lib("libcublasLt.so.", "GEMMs with epilogues");
    CublasLtApi a{};
    lib.symbol(a.create, "cublasLtCreate");
    lib.symbol(a.desc_create, "cublasLtMatmulDescCreate");
    lib.symbol(a.desc_destroy, "cublasLtMatmulDescDestroy");
    lib.symbol(a.desc_set, "cublasLtMatmulDescSetAttribute");
    lib.symbol(a.layout_create, "cublasLtMatrixLayoutCreate");
    lib.symbol(a.layout_destroy, "cublasLtMatrixLayoutDestroy");
    lib.symbol(a.pref_create, "cublasLtMatmulPreferenceCreate");
    lib.symbol(a.pref_destroy, "cublasLtMatmulPreferenceDestroy");
    lib.symbol(a.pref_set, "cublasLtMatmulPreferenceSetAttribute");
    lib.symbol(a.heuristic, "cublasLtMatmulAlgoGetHeuristic");
    lib.symbol(a.matmul, "cublasLtMatmul");
    return a;
  }();
  return api;
}

namespace {

constexpr size_t kLtWorkspace = size_t{32} << 20;  // as cuBLAS's

cublasLtHandle_t cublaslt_for(DeviceContext& ctx) {
  if (!ctx.cublaslt) {
    (void)cublas_api();  // its status names, for the errors
    TG_CUBLAS_CHECK(cublaslt_api().create(&ctx.cublaslt));
    ctx.lt_workspace = ctx.allocator.allocate(kLtWorkspace);
  }
  return ctx.cublaslt;
}

cublasHandle_t cublas_for(DeviceContext& ctx) {
  if (!ctx.cublas) {
    constexpr size_t kWorkspace = size_t{32} << 20;  // what cuBLAS asks for on Hopper; from our allocator
    const CublasApi& cublas = cublas_api();
    TG_CUBLAS_CHECK(cublas.create(&ctx.cublas));
    TG_CUBLAS_CHECK(cublas.set_stream(ctx.cublas, ctx.stream));
    TG_CUBLAS_CHECK(cublas.set_workspace(ctx.cublas, ctx.allocator.allocate(kWorkspace), kWorkspace));
  }
  return ctx.cublas;
}

}  // namespace

// Note [one product]
// A product with no batch axis goes to cublasGemmEx, the entry point PyTorch calls for it, so that
// both get cuBLAS's choice of kernel for a plain GEMM: the strided-batched entry point, given a
// batch of one, chooses by heuristics of its own.
//
// Row-major out (n, m) is column-major out^T (m, n) = op(b)^T (m, k) @ op(a)^T (k, n): cuBLAS sees
// each row-major matrix as its column-major transpose, with the row length as leading dimension.
// The plan's innermost batch axis that out keeps is one strided-batched call (a repeating operand
// has stride 0 there); its other axes are a loop of calls, and along an axis out sums over, every
// call after the first of its out matrices adds to them (beta 1), in order on the stream; with
// accumulate, every call adds.
void matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& out, bool accumulate) {
  const kernels::MatmulPlan p = kernels::plan_matmul("matmul", a, ta, b, tb, out);
  if (p.empty()) return;
  DeviceContext& ctx = context(out);
  if (p.k == 0 || p.products() == 0) {  // empty sums: zeros (nothing to add)
    if (!accumulate) TG_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), ctx.stream));
    return;
  }
  int batched = -1;  // the strided-batched axis
  for (int i = p.batch - 1; i >= 0 && batched < 0; --i)
    if (p.stride_out[static_cast<size_t>(i)] != 0) batched = i;
  const auto at = static_cast<size_t>(batched < 0 ? 0 : batched);
  const int64_t count = batched < 0 ? 1 : p.size[at];
  const long long step_a = batched < 0 ? 0 : p.stride_a[at], step_b = batched < 0 ? 0 : p.stride_b[at],
                  step_out = batched < 0 ? 0 : p.stride_out[at];
  constexpr int64_t kMaxCount = 65535;  // products per call
  // T: the operands' type; O: out's (f32 or bf16 for bf16 operands, whose products cuBLAS sums in
  // f32 on the tensor cores, rounding a bf16 out once); S: the scalars', the sums' type
  auto launch = [&]<class T, class O>() {
    constexpr bool f64 = std::is_same_v<T, double>, bf16 = std::is_same_v<T, __nv_bfloat16>;
    using S = std::conditional_t<f64, double, float>;
    const cudaDataType type = f64 ? CUDA_R_64F : bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cudaDataType out_type = f64 ? CUDA_R_64F : std::is_same_v<O, __nv_bfloat16> ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t compute =
        f64 ? CUBLAS_COMPUTE_64F : allow_tf32() && !bf16 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const S one = 1, zero = 0;
    const CublasApi& cublas = cublas_api();
    cublasHandle_t handle = cublas_for(ctx);
    for (int64_t call = 0; call < p.products() / count; ++call) {
      // unravel `call` over the plan's axes but the batched one, innermost last
      int64_t rest = call, oa = 0, ob = 0, oo = 0;
      bool first = !accumulate;  // of its out matrices: every summed axis at 0, and out not added to
      for (int i = p.batch - 1; i >= 0; --i) {
        if (i == batched) continue;
        const auto ax = static_cast<size_t>(i);
        const int64_t index = rest % p.size[ax];
        rest /= p.size[ax];
        oa += index * p.stride_a[ax];
        ob += index * p.stride_b[ax];
        oo += index * p.stride_out[ax];
        if (p.stride_out[ax] == 0 && index != 0) first = false;
      }
      if (count == 1) {  // one product: the plain GEMM, whose kernel choice is PyTorch's (Note [one product])
        TG_CUBLAS_CHECK(cublas.gemm_ex(handle, p.tb ? CUBLAS_OP_T : CUBLAS_OP_N, p.ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                       static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), &one,
                                       cdata<T>(b) + ob, type, static_cast<int>(p.ldb), cdata<T>(a) + oa, type,
                                       static_cast<int>(p.lda), first ? &zero : &one, mdata<O>(out) + oo, out_type,
                                       static_cast<int>(p.m), compute, CUBLAS_GEMM_DEFAULT));
        continue;
      }
      for (int64_t begin = 0; begin < count; begin += kMaxCount) {
        TG_CUBLAS_CHECK(cublas.gemm_strided_batched_ex(
            handle, p.tb ? CUBLAS_OP_T : CUBLAS_OP_N, p.ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(p.m),
            static_cast<int>(p.n), static_cast<int>(p.k), &one, cdata<T>(b) + ob + begin * step_b, type,
            static_cast<int>(p.ldb), step_b, cdata<T>(a) + oa + begin * step_a, type, static_cast<int>(p.lda), step_a,
            first ? &zero : &one, mdata<O>(out) + oo + begin * step_out, out_type, static_cast<int>(p.m), step_out,
            static_cast<int>(std::min(kMaxCount, count - begin)), compute, CUBLAS_GEMM_DEFAULT));
      }
    }
  };
  if (a.dtype() == DType::bf16 && out.dtype() == DType::bf16) launch.template operator()<__nv_bfloat16, __nv_bfloat16>();
  else if (a.dtype() == DType::bf16) launch.template operator()<__nv_bfloat16, float>();  // the plan checked out
  else dispatch_float("matmul", a.dtype(), [&]<class T>() { launch.template operator()<T, T>(); });
}

namespace {

// One column-major cuBLASLt GEMM with an epilogue: d (m, n) = op(a) @ op(b), op(a) (m, k) and
// op(b) (k, n), each operand given as stored (rows, cols, ld, its type), f32 sums; `vector` is the
// epilogue's bias (read) or bias gradient (written); `aux` (m, n), d's type, is the GELU epilogues'
// matrix of the activation's inputs (written by GELU_AUX, read by DGELU). The algorithm is cuBLASLt's first by its
// heuristics for these sizes and alignments, with the workspace cuBLAS gets; false, with nothing
// done, where it has none.
struct LtOperand {
  const void* data;
  cudaDataType type;
  int64_t rows, cols;
  bool transposed;
};
bool lt_gemm(DeviceContext& ctx, const LtOperand& a, const LtOperand& b, void* d, cudaDataType d_type, int64_t m,
             int64_t n, cublasLtEpilogue_t epilogue, const void* vector, int32_t vector_type, void* aux = nullptr) {
  const CublasLtApi& lt = cublaslt_api();
  cublasLtHandle_t handle = cublaslt_for(ctx);
  // every descriptor destroyed on the way out, thrown or not
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  struct Release {
    const CublasLtApi& lt;
    cublasLtMatmulDesc_t& desc;
    cublasLtMatrixLayout_t &la, &lb, &ld;
    cublasLtMatmulPreference_t& pref;
    ~Release() {
      if (pref) lt.pref_destroy(pref);
      for (cublasLtMatrixLayout_t l : {la, lb, ld})
        if (l) lt.layout_destroy(l);
      if (desc) lt.desc_destroy(desc);
    }
  } release{lt, desc, la, lb, ld, pref};
  TG_CUBLAS_CHECK(lt.desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  TG_CUBLAS_CHECK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  TG_CUBLAS_CHECK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  TG_CUBLAS_CHECK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  TG_CUBLAS_CHECK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector, sizeof vector));
  if (vector_type >= 0)
    TG_CUBLAS_CHECK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &vector_type, sizeof vector_type));
  if (aux) {  // set before the heuristics, which choose by its alignment
    const int64_t aux_ld = m;
    TG_CUBLAS_CHECK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    TG_CUBLAS_CHECK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
  }
  auto rows = [](int64_t r) { return static_cast<uint64_t>(r); };
  TG_CUBLAS_CHECK(lt.layout_create(&la, a.type, rows(a.rows), rows(a.cols), a.rows));
  TG_CUBLAS_CHECK(lt.layout_create(&lb, b.type, rows(b.rows), rows(b.cols), b.rows));
  TG_CUBLAS_CHECK(lt.layout_create(&ld, d_type, rows(m), rows(n), m));
  TG_CUBLAS_CHECK(lt.pref_create(&pref));
  const uint64_t workspace = kLtWorkspace;
  TG_CUBLAS_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
  // the operands' alignment, for the heuristics to choose only kernels that take it: what both the
  // start and every column's start (ld elements on) are aligned to
  auto alignment = [](const void* ptr, int64_t column_bytes) {
    uint32_t v = 256;
    while (v > 1 && (reinterpret_cast<uintptr_t>(ptr) % v != 0 || column_bytes % v != 0)) v /= 2;
    return v;
  };
  auto bytes = [](cudaDataType t) { return t == CUDA_R_16BF ? 2 : 4; };
  const uint32_t align_a = alignment(a.data, a.rows * bytes(a.type)), align_b = alignment(b.data, b.rows * bytes(b.type)),
                 align_d = alignment(d, m * bytes(d_type));
  TG_CUBLAS_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
  TG_CUBLAS_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
  TG_CUBLAS_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof align_d));
  TG_CUBLAS_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d));
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  // no algorithm for these sizes, alignments and epilogue: cuBLASLt answers NOT_SUPPORTED, or
  // INVALID_VALUE for some of them (rows of 14 bytes)
  if (lt.heuristic(handle, desc, la, lb, ld, ld, pref, 1, &best, &found) != CUBLAS_STATUS_SUCCESS || found == 0)
    return false;
  const float one = 1.0f, zero = 0.0f;
  TG_CUBLAS_CHECK(lt.matmul(handle, desc, &one, a.data, la, b.data, lb, &zero, d, ld, d, ld, &best.algo,
                            ctx.lt_workspace, kLtWorkspace, ctx.stream));
  return true;
}

}  // namespace

// Note [bias in the epilogue]
// Under autocast a linear with a bias multiplies bf16 operands, sums in f32, adds the bias to the
// sums and rounds once; its backward's bias gradient is the column sums of dy. In separate kernels
// the forward writes the f32 sums, adds the bias over them and casts (three more passes over the
// output, in f32), and the backward widens dy and sums its columns (two more passes over dy).
// cuBLASLt does both inside the GEMMs: the BIAS epilogue adds the bias to the f32 sums before the
// one rounding, and the BGRADB epilogue of the weight's gradient sums dy's columns as the GEMM
// reads them. Row-major matrices are their column-major transposes: the forward is out^T (m, n) =
// w (k, m)^T @ x^T (k, n), the bias along out^T's rows; the weight's gradient is dW^T (k, m) =
// x^T (k, n) @ dy (m, n)^T, whose reduction over n makes dy's column sums, a vector along dW^T's
// columns. Where cuBLASLt has no kernel for the sizes (or the product is empty) these return false
// and the caller runs the separate kernels. cuBLASLt 13.0 has no kernel that adds an f32 bias to
// sums it rounds to bf16 (on the H200 it ran every aligned size with a bf16 bias and refused each
// with an f32 one): with the f32 bias of a model's f32 parameters the GEMM writes f32 sums with the
// bias added and a cast rounds them, one pass fewer than the separate kernels, the same rounding.
bool matmul_bias(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const int64_t n = x.dim(0), k = x.dim(1), m = w.dim(0);
  if (n == 0 || m == 0 || k == 0) return false;  // the separate kernels' zeros and bias
  return lt_gemm(context(out), {w.raw_data(), CUDA_R_16BF, k, m, true}, {x.raw_data(), CUDA_R_16BF, k, n, false},
                 out.raw_data(), out.dtype() == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F, m, n, CUBLASLT_EPILOGUE_BIAS,
                 bias.raw_data(),
                 bias.dtype() == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F);
}

bool matmul_weight_bias_grad(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db) {
  const int64_t n = x.dim(0), k = x.dim(1), m = dy.dim(1);
  if (n == 0 || m == 0 || k == 0) return false;
  return lt_gemm(context(dw), {x.raw_data(), CUDA_R_16BF, k, n, false}, {dy.raw_data(), CUDA_R_16BF, m, n, true},
                 dw.raw_data(), CUDA_R_32F, k, m, CUBLASLT_EPILOGUE_BGRADB, db.raw_data(), -1);
}

// Note [the MLP's epilogues] in src/ops/fused/mlp.cpp. Row-major as column-major, as above: the
// forward is act^T (h, n) = w (k, h)^T @ x^T (k, n), GELU applied to the f32 sums, pre^T (h, n)
// the aux matrix; the backward is dpre^T (h, n) = w^T (h, m) @ dy^T (m, n), each sum scaled by
// gelu'(pre^T) before its rounding. A bf16 bias (along pre^T's rows) is added to the sums first
// (GELU_AUX_BIAS). cuBLASLt's GELU is the tanh form, and the aux matrix's leading dimension (h) must
// be a multiple of 8.
bool matmul_gelu(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& pre, Tensor& act) {
  const int64_t n = x.dim(0), k = x.dim(1), h = w.dim(0);
  if (n == 0 || h == 0 || k == 0 || h % 8 != 0 || (bias.defined() && bias.dtype() != DType::bf16)) return false;
  return lt_gemm(context(act), {w.raw_data(), CUDA_R_16BF, k, h, true}, {x.raw_data(), CUDA_R_16BF, k, n, false},
                 act.raw_data(), CUDA_R_16BF, h, n,
                 bias.defined() ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX,
                 bias.defined() ? bias.raw_data() : nullptr, bias.defined() ? CUDA_R_16BF : -1, pre.raw_data());
}

bool matmul_dgelu(const Tensor& dy, const Tensor& w, const Tensor& pre, Tensor& dpre) {
  const int64_t n = dy.dim(0), m = dy.dim(1), h = w.dim(1);
  if (n == 0 || h == 0 || m == 0 || h % 8 != 0) return false;
  return lt_gemm(context(dpre), {w.raw_data(), CUDA_R_16BF, h, m, false}, {dy.raw_data(), CUDA_R_16BF, m, n, false},
                 dpre.raw_data(), CUDA_R_16BF, h, n, CUBLASLT_EPILOGUE_DGELU, nullptr, -1,
                 pre.raw_data());
}

void matmul_fsum(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& out) {
  const int64_t n = out.dim(0), m = out.dim(1), k = ta ? a.dim(0) : a.dim(1);
  const int64_t lda = a.dim(1), ldb = b.dim(1);
  if (n * m == 0) return;
  DeviceContext& ctx = context(out);
  matmul_fsum_kernel<<<blocks_for(n * m, 128), 128, 0, ctx.stream>>>(cdata<double>(a), ta, cdata<double>(b), tb,
                                                                      mdata<double>(out), n, m, k, lda, ldb,
                                                                      ctx.error_site("matmul_fsum", 0, 0));
  TG_CUDA_CHECK_LAUNCH();
}

void transpose(const Tensor& x, Tensor& out) {
  const int64_t n = x.dim(0), m = x.dim(1);
  if (n * m == 0) return;
  dispatch_float("transpose", x.dtype(), [&]<class T>() {
    transpose_kernel<<<blocks_for(n * m), kBlock, 0, stream_for(x)>>>(cdata<T>(x), mdata<T>(out), n, m);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void add_row(const Tensor& x, const Tensor& b, Tensor& out) {
  const int64_t n = x.dim(0), m = x.dim(1);
  if (n * m == 0) return;
  dispatch_float("add_row", x.dtype(), [&]<class T>() {
    add_row_kernel<<<blocks_for(n * m), kBlock, 0, stream_for(x)>>>(cdata<T>(x), cdata<T>(b), mdata<T>(out), n, m);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void sum_rows(const Tensor& x, Tensor& out) {
  const int64_t n = x.dim(0), m = x.dim(1);
  if (m == 0) return;
  DeviceContext& ctx = context(x);
  dispatch_float("sum_rows", x.dtype(), [&]<class T>() {
    const ErrorSite site = std::is_same_v<T, double> ? ctx.error_site("sum_rows", 0, 0) : ErrorSite{};
    sum_rows_kernel<<<blocks_for(m, 128), 128, 0, ctx.stream>>>(cdata<T>(x), mdata<T>(out), n, m, site);
    TG_CUDA_CHECK_LAUNCH();
  });
}

namespace {

void sum_all_divided(const char* op, const Tensor& x, Tensor& out, double divisor) {
  DeviceContext& ctx = context(x);
  const int64_t n = x.numel();
  dispatch_float(op, x.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, double>) {
      sum_all_f64_kernel<<<1, 1, 0, ctx.stream>>>(cdata<double>(x), mdata<double>(out), n, divisor,
                                                   ctx.error_site(op, 0, 0));
    } else {
      sum_all_f32_kernel<<<1, kSumSlots, 0, ctx.stream>>>(cdata<float>(x), mdata<float>(out), n,
                                                           static_cast<float>(divisor));
    }
    TG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void sum_all(const Tensor& x, Tensor& out) { sum_all_divided("sum", x, out, 1.0); }

// sum / n: the CPU divides the rounded sum by n in T, so the f32 kernel does too.
void mean_all(const Tensor& x, Tensor& out) { sum_all_divided("mean", x, out, static_cast<double>(x.numel())); }

}  // namespace tapegrad::cuda
