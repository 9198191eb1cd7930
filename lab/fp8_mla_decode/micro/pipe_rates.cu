// Issue rates of the instructions one FP8 MLA decode tile is made of, on this GPU (one SM's clock, clock64):
// the e4m3x2 -> f16x2 conversion (F2FP), the f32 -> f16x2 pack of P, the integer-pipe e4m3 conversion
// (LOP3/SHF), PRMT, mma.sync m16n8k16 f16 (HMMA), mma.sync m16n8k32 e4m3 (the FP8 tensor path), and the
// conversion interleaved with HMMA as the kernel's S product has it (2 F2FP per HMMA).
// Why: the kernel's products alone take ~1,166 SM cycles per 32-row tile (H200, round 4: 1,170 us at 8.4M rows,
// 1,986 tiles per SM, taking 1.98 GHz); if F2FP runs at 16
// lanes/clk/SM, its 544 warp-instructions per tile are ~1,088 of those cycles and the conversion pipe, not the
// barriers, bounds the kernel; at 64/clk they are ~272. Nothing in the CUDA guide's table names this instruction.
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -o /tmp/pipe_rates pipe_rates.cu && /tmp/pipe_rates
// Prints one line per op: warp-level ops and lane-ops per clock per SM (8 independent chains per thread,
// 32 warps per SM, 4,096 iterations; median over 5 launches).
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>
#include <cuda_runtime.h>

#define ITERS 4096
#define CH 8

typedef unsigned int u32;

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(1); } } while (0)

__device__ __forceinline__ u32 cvt_e4m3(u32 x) {
  u32 r;
  asm volatile("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}" : "=r"(r) : "r"(x));
  return r;
}
__device__ __forceinline__ u32 cvt_pack(u32 x) {
  u32 r;
  asm volatile("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(__int_as_float(x)), "f"(__int_as_float(x ^ 1)));
  return r;
}
// the kernel's f8hi_to_f16x2_alu, as PTX so that the compiler cannot compose the chain away
__device__ __forceinline__ u32 alu_e4m3(u32 x) {
  u32 r;
  asm volatile("{\n .reg .b32 t, s;\n and.b32 t, %1, 0x7F007F00;\n shr.b32 t, t, 1;\n and.b32 s, %1, 0x80008000;\n"
               " or.b32 %0, t, s;\n}" : "=r"(r) : "r"(x));
  return r;
}
__device__ __forceinline__ u32 prmt(u32 a, u32 b) {
  u32 r;
  asm volatile("prmt.b32 %0, %1, %2, 0x5140;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ void hmma(float* c, u32 a0, u32 a1, u32 b0) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(a0), "r"(a1), "r"(b0), "r"(b0));
}
__device__ __forceinline__ void qmma(float* c, u32 a0, u32 a1, u32 b0) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(a0), "r"(a1), "r"(b0), "r"(b0));
}

// OP (one "op" = what the rate counts): 0 F2FP e4m3x2 (+ a LOP3 keeping the bytes finite), 1 F2FP pack f32x2,
// 2 integer-pipe e4m3x2 (LOP3, SHF, LOP3 + an IADD), 3 PRMT, 4 HMMA f16, 5 mma.sync e4m3 m16n8k32 (on sm_90a
// ptxas lowers it to F2FP + HMMA: no FP8 mma.sync on Hopper; native QMMA on sm_89/sm_120),
// 7 one HMMA fed by two F2FP e4m3x2 (the S product's mix)
template <int OP>
__global__ void __launch_bounds__(512) rate(u32* out, long long* cyc, u32 seed) {
  u32 r[CH];
  float acc[CH][4];
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    r[c] = seed * (threadIdx.x + 7 * c + 1);
    acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.f;
  }
  __syncthreads();
  const long long t0 = clock64();
  for (int i = 0; i < ITERS; ++i) {
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      if (OP == 0) r[c] = cvt_e4m3(r[c]) & 0x3f3f3f3fu;  // keeps the bytes finite (the LOP3 issues on another pipe)
      if (OP == 1) r[c] = cvt_pack(r[c]);
      if (OP == 2) r[c] = alu_e4m3(r[c]) + (u32)i;  // + IADD: the loop index keeps each step live
      if (OP == 3) r[c] = prmt(r[c], (u32)i);
      if (OP == 4) hmma(acc[c], r[c], r[c] ^ 1u, r[c] ^ 2u);
      if (OP == 5) qmma(acc[c], r[c], r[c] ^ 1u, r[c] ^ 2u);
      if (OP == 7) hmma(acc[c], r[c], r[c] ^ 1u, cvt_e4m3(r[c] + i) ^ cvt_e4m3(r[c] - i));
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
  u32 x = 0;
#pragma unroll
  for (int c = 0; c < CH; ++c) x ^= r[c] ^ __float_as_uint(acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

template <int OP>
void measure(const char* name, int sms) {
  const int blocks = 2 * sms, threads = 512;  // 32 warps per SM
  u32* out;
  long long* cyc;
  CK(cudaMalloc(&out, blocks * threads * sizeof(u32)));
  CK(cudaMalloc(&cyc, blocks * sizeof(long long)));
  std::vector<double> rates;
  for (int rep = 0; rep < 6; ++rep) {
    rate<OP><<<blocks, threads>>>(out, cyc, 0x9E3779B9u + rep);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<long long> c(blocks);
    CK(cudaMemcpy(c.data(), cyc, blocks * sizeof(long long), cudaMemcpyDeviceToHost));
    const double mean = [&] { double s = 0; for (long long v : c) s += v; return s / blocks; }();
    const double warp_instr_per_sm = 2.0 * threads / 32 * (double)ITERS * CH;
    if (rep) rates.push_back(warp_instr_per_sm / mean);  // the first launch warms up
  }
  std::sort(rates.begin(), rates.end());
  const double med = rates[rates.size() / 2];
  printf("%-38s %8.3f warp-ops/clk/SM  %8.1f lane-ops/clk/SM\n", name, med, med * 32);
  CK(cudaFree(out));
  CK(cudaFree(cyc));
}

int main() {
  int dev = 0, sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, dev));
  printf("%s, %d SMs; per op: issue rate per SM (clock64 cycles, median of 5)\n", p.name, sms);
  measure<0>("F2FP e4m3x2->f16x2 (+LOP3)", sms);
  measure<1>("F2FP f32x2->f16x2 pack", sms);
  measure<2>("e4m3x2->f16x2 on int pipes (4 instr)", sms);
  measure<3>("PRMT", sms);
  measure<4>("HMMA m16n8k16 f16->f32", sms);
  measure<5>("mma m16n8k32 e4m3->f32", sms);
  measure<7>("HMMA with 2 F2FP e4m3 (per HMMA)", sms);
  return 0;
}
