// The roof of the 128-head FP8 MLA decode in TFLOP/s, timed with CUDA events over the whole GPU (no clock64):
// the instruction the kernel multiplies with (mma.sync m16n8k16 f16 -> f32, HMMA) alone, and HMMA fed by the
// kernel's conversions (two cvt.rn.f16x2.e4m3x2 per HMMA: every FP8 byte is converted once per product, S and
// P V alike, 1,088 F2FP per 544 HMMA per 64-row tile of 16 heads), and F2FP alone.
// Why: pipe_rates.cu counts issue per SM with clock64 and two 512-thread blocks per SM, which overstates a rate
// when the two blocks do not run together; events over a full grid give rates comparable with cuBLAS's TFLOP/s.
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -o /tmp/mma_roof mma_roof.cu && /tmp/mma_roof
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>
#include <cuda_runtime.h>

#define CH 8
typedef unsigned int u32;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(1); } } while (0)

__device__ __forceinline__ u32 cvt_e4m3(u32 x) {
  u32 r;
  asm volatile("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}" : "=r"(r) : "r"(x));
  return r;
}
__device__ __forceinline__ void hmma(float* c, u32 a0, u32 a1, u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(a0), "r"(a1), "r"(b0), "r"(b1));
}

// OP 0: HMMA alone; 1: HMMA with two F2FP e4m3x2 making its B operand; 2: F2FP alone (one per step)
template <int OP>
__global__ void __launch_bounds__(256) roof(u32* out, u32 seed, int iters) {
  u32 r[CH];
  float acc[CH][4];
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    r[c] = (seed * (threadIdx.x + 7 * c + 1)) & 0x3f3f3f3fu;
    acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.f;
  }
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      if (OP == 0) hmma(acc[c], r[c], r[c] ^ 1u, r[c] ^ 2u, r[c] ^ 3u);
      if (OP == 1) hmma(acc[c], r[c], r[c] ^ 1u, cvt_e4m3(r[c] + (u32)i), cvt_e4m3(r[c] - (u32)i));
      if (OP == 2) r[c] = cvt_e4m3(r[c] + (u32)i) & 0x3f3f3f3fu;
    }
  }
  u32 x = 0;
#pragma unroll
  for (int c = 0; c < CH; ++c) x ^= r[c] ^ __float_as_uint(acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

template <int OP>
void measure(const char* name, int sms, int per_sm) {
  const int blocks = per_sm * sms, threads = 256, iters = 2048;
  u32* out;
  CK(cudaMalloc(&out, (size_t)blocks * threads * sizeof(u32)));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int rep = 0; rep < 6; ++rep) {
    CK(cudaEventRecord(a));
    roof<OP><<<blocks, threads>>>(out, 0x9E3779B9u + rep, iters);
    CK(cudaGetLastError());
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t;
    CK(cudaEventElapsedTime(&t, a, b));
    if (rep) ms.push_back(t);  // the first launch warms up
  }
  std::sort(ms.begin(), ms.end());
  const double t = ms[ms.size() / 2] * 1e-3;
  const double warp_ops = (double)blocks * (threads / 32) * iters * CH;  // HMMA (OP 0, 1) or F2FP (OP 2)
  if (OP == 2)
    printf("%-34s %2d CTAs/SM  %8.1f G F2FP warp-instr/s per SM\n", name, per_sm, warp_ops / t / sms * 1e-9);
  else
    printf("%-34s %2d CTAs/SM  %8.1f TFLOP/s (HMMA m16n8k16: 4,096 FLOP each)\n", name, per_sm,
           warp_ops * 4096.0 / t * 1e-12);
  CK(cudaFree(out));
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  printf("%s, %d SMs; event-timed over the grid, median of 5\n", p.name, sms);
  for (int per_sm : {2, 4}) {
    measure<0>("HMMA f16->f32 alone", sms, per_sm);
    measure<1>("HMMA + 2 F2FP e4m3x2 (kernel mix)", sms, per_sm);
    measure<2>("F2FP e4m3x2->f16x2 alone", sms, per_sm);
  }
  return 0;
}
