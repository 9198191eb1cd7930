// How fast can an H200 gather the decode kernel's rows at all? The FP8 MLA decode reads 576-byte rows picked at
// random from a 495,000-row pool (kv_indices); the kernel's loads alone reached 81.5% of copy (round 4), so the goal
// (>= 80% for the whole kernel) is only reachable if some way of gathering these rows runs well above that.
// This measures the access pattern alone, with nothing computed, by four loaders:
//   seq   the same bytes read sequentially (LDG.128): the read ceiling, no gather;
//   ldg   rows gathered into registers (LDG.128, 16 B per thread, U loads in flight per thread);
//   cpa   rows gathered into a shared-memory ring by cp.async (16 B per thread and copy), as the kernel's LOADER 0
//         (thread t: 144 contiguous bytes of row t / 4);
//   cpf   the same in the order of the bytes (thread t: chunks t, t + 128, ... of the tile's rows end to end), as
//         the kernel's LOADER 3;
//   tma   one cp.async.bulk per row into a ring of 32-row tiles, W warps issuing, S stages, as LOADER 1/2;
// under the harness's conditions: 8 layers, each its own pool of 495,000 x 576 B, 8,388,608 random rows per layer
// (ctx 128K x bs 64), L2 flushed (256 MB written) before each pass over the 8 layers; us per layer, TB/s of rows
// read, and % of a 1 GiB device-to-device copy timed in the same run, read + write counted (as the harness does:
// benchmarks/gpu_fp8_mla_decode.py's copy_ceiling).
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -o /tmp/gather_rates gather_rates.cu && /tmp/gather_rates
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(1); } } while (0)

typedef unsigned int u32;
typedef unsigned char u8;
typedef long long i64;

#define ROWB 576
#define CHK 36  // 16-byte chunks per row
#define LAYERS 8
#define POOL 495000
#define NROWS (64 * 131072)

__device__ u32 g_sink;

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// sequential read of the same byte count (16 B per thread, U loads in flight)
template <int U>
__global__ void seq_read(const uint4* __restrict__ src, i64 n16) {
  u32 acc = 0;
  const i64 stride = (i64)gridDim.x * blockDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = i + u * stride < n16 ? __ldcs(src + i + u * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].w;
  }
  if (acc == 0x12345678u) g_sink = acc;
}

// gather into registers: element e = (row, chunk); U independent loads per thread
template <int U>
__global__ void ldg_gather(const u8* __restrict__ pool, const int* __restrict__ ids, i64 nrows) {
  u32 acc = 0;
  const i64 n = nrows * CHK, stride = (i64)gridDim.x * blockDim.x;
  for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const i64 k = e + u * stride;
      v[u] = make_uint4(0, 0, 0, 0);
      if (k < n) v[u] = __ldcs((const uint4*)(pool + (i64)__ldg(ids + k / CHK) * ROWB) + k % CHK);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].w;
  }
  if (acc == 0x12345678u) g_sink = acc;
}

// A persistent CTA walks 32-row tiles (tile = blockIdx.x + k * gridDim.x) through an S-deep ring.
// LOADER 0: cp.async, 128 threads x 9 chunks of 16 B per tile (144 contiguous bytes each); LOADER 1:
// cp.async.bulk, one row per lane of the first W warps; LOADER 2: cp.async in byte order (chunk tid + 128 c). The consumer touches one word per row (so the ring slot is really waited for).
template <int LOADER, int S, int W>
__global__ void __launch_bounds__(128) ring_gather(const u8* __restrict__ pool, const int* __restrict__ ids,
                                                   int ntiles) {
  extern __shared__ __align__(128) u8 smem[];
  unsigned long long* bars = (unsigned long long*)(smem + S * 32 * 592);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int rows_per_warp = 32 / W;
  if (LOADER == 1 && tid == 0)
    for (int s = 0; s < S; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(&bars[s])) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  const int mine = (ntiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;  // tiles of this CTA
  auto issue = [&](int k) {
    const int tile = blockIdx.x + k * gridDim.x;
    u8* stage = smem + (k % S) * 32 * 592;
    if (LOADER == 2) {
#pragma unroll
      for (int c = 0; c < 9; ++c) {
        const int e = tid + 128 * c, row = e / CHK, chunk = e - row * CHK;
        const u8* src = pool + (i64)__ldg(ids + (i64)tile * 32 + row) * ROWB + chunk * 16;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(stage + row * 592 + chunk * 16)),
                     "l"(src));
      }
      asm volatile("cp.async.commit_group;\n" ::);
    } else if (LOADER == 0) {
      const int row = tid >> 2, part = tid & 3;
      const u8* src = pool + (i64)__ldg(ids + (i64)tile * 32 + row) * ROWB + part * 144;
      u8* dst = stage + row * 592 + part * 144;
#pragma unroll
      for (int c = 0; c < 9; ++c)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst + 16 * c)), "l"(src + 16 * c));
      asm volatile("cp.async.commit_group;\n" ::);
    } else {
      if (tid == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(&bars[k % S])),
                     "r"(32 * ROWB) : "memory");
      if (warp < W && lane < rows_per_warp) {
        const int row = warp * rows_per_warp + lane;
        const u8* src = pool + (i64)__ldg(ids + (i64)tile * 32 + row) * ROWB;
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                     ::"r"(smem_addr(stage + row * 592)), "l"(src), "r"(ROWB), "r"(smem_addr(&bars[k % S]))
                     : "memory");
      }
    }
  };
  u32 acc = 0;
  for (int k = 0; k < S - 1; ++k) {
    if (k < mine) issue(k);
    else if (LOADER != 1) asm volatile("cp.async.commit_group;\n" ::);
  }
  for (int k = 0; k < mine; ++k) {
    if (LOADER != 1) {
      asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 2));
    } else {
      u32 done = 0, par = (k / S) & 1;
      while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(smem_addr(&bars[k % S])), "r"(par) : "memory");
    }
    __syncthreads();  // tile k landed for every thread; every thread is done with tile k - 1's slot
    if (tid < 32) acc ^= *(const u32*)(smem + (k % S) * 32 * 592 + tid * 592 + 4 * (k & 127));
    if (k + S - 1 < mine) issue(k + S - 1);
    else if (LOADER != 1) asm volatile("cp.async.commit_group;\n" ::);
  }
  if (acc == 0x12345678u) g_sink = acc;
}

struct Bufs {
  u8* pool[LAYERS];
  int* ids[LAYERS];
  u8* flush;
  cudaEvent_t a, b;
};

// us per layer: median of 5 passes over the 8 layers, L2 flushed before each pass
template <class F>
static float time_layers(Bufs& B, F launch) {
  std::vector<float> t;
  for (int rep = 0; rep < 6; ++rep) {
    CK(cudaMemsetAsync(B.flush, rep, 256 << 20));
    CK(cudaEventRecord(B.a));
    for (int l = 0; l < LAYERS; ++l) launch(B.pool[l], B.ids[l]);
    CK(cudaEventRecord(B.b));
    CK(cudaEventSynchronize(B.b));
    CK(cudaGetLastError());
    float ms;
    CK(cudaEventElapsedTime(&ms, B.a, B.b));
    if (rep) t.push_back(ms * 1000.f / LAYERS);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

__global__ void fill_ids(int* ids, i64 n, u32 seed) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    u32 x = (u32)i * 2654435761u ^ seed;  // a hash: uniform over the pool, like the harness's randint
    x ^= x >> 15; x *= 2246822519u; x ^= x >> 13; x *= 3266489917u; x ^= x >> 16;
    ids[i] = (int)(x % POOL);
  }
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  Bufs B;
  for (int l = 0; l < LAYERS; ++l) {
    CK(cudaMalloc(&B.pool[l], (size_t)POOL * ROWB));
    CK(cudaMemset(B.pool[l], l + 1, (size_t)POOL * ROWB));
    CK(cudaMalloc(&B.ids[l], (size_t)NROWS * 4));
    fill_ids<<<1024, 256>>>(B.ids[l], NROWS, 0x9e3779b9u * (l + 1));
  }
  CK(cudaMalloc(&B.flush, 256 << 20));
  CK(cudaEventCreate(&B.a));
  CK(cudaEventCreate(&B.b));
  const double row_bytes = (double)NROWS * ROWB;

  // the ceiling the harness divides by: a 2 GiB device-to-device copy, bytes counted once
  u8 *c0, *c1;
  const size_t cb = (size_t)1 << 30;
  CK(cudaMalloc(&c0, cb));
  CK(cudaMalloc(&c1, cb));
  std::vector<float> ct;
  for (int rep = 0; rep < 6; ++rep) {
    CK(cudaEventRecord(B.a));
    CK(cudaMemcpyAsync(c1, c0, cb, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(B.b));
    CK(cudaEventSynchronize(B.b));
    float ms;
    CK(cudaEventElapsedTime(&ms, B.a, B.b));
    if (rep) ct.push_back(ms);
  }
  std::sort(ct.begin(), ct.end());
  const double copy_tbps = 2.0 * cb / (ct[ct.size() / 2] * 1e-3) / 1e12;  // read + write
  CK(cudaFree(c0));
  CK(cudaFree(c1));
  printf("%s, %d SMs; copy 1 GiB (read + write): %.3f TB/s; per layer %d random rows of %d B from a %d-row pool, 8 layers, L2 "
         "flushed\n", prop.name, sms, copy_tbps, NROWS, ROWB, POOL);
  auto report = [&](const char* name, float us) {
    const double tbps = row_bytes / (us * 1e-6) / 1e12;
    printf("%-34s %9.1f us/layer %6.3f TB/s %6.1f%% of copy\n", name, us, tbps, 100.0 * tbps / copy_tbps);
  };

  // sequential: the rows' byte count read from the start of a pool (the pool is smaller: read it ~17x
  // through a 4.8 GB window would hit L2 the same way; instead read a contiguous 4.83 GB buffer)
  {
    u8* big;
    const i64 n16 = (i64)NROWS * CHK;
    CK(cudaMalloc(&big, (size_t)n16 * 16));
    CK(cudaMemset(big, 3, (size_t)n16 * 16));
    float us = time_layers(B, [&](u8*, int*) { seq_read<4><<<sms * 16, 256>>>((const uint4*)big, n16); });
    report("seq LDG.128 x4 (no gather)", us);
    CK(cudaFree(big));
  }
  // LDG gathers: loads in flight per thread x threads per SM
  {
    float us;
    us = time_layers(B, [&](u8* p, int* i) { ldg_gather<4><<<sms * 8, 256>>>(p, i, NROWS); });
    report("ldg x4, 2048 thr/SM", us);
    us = time_layers(B, [&](u8* p, int* i) { ldg_gather<8><<<sms * 8, 256>>>(p, i, NROWS); });
    report("ldg x8, 2048 thr/SM", us);
    us = time_layers(B, [&](u8* p, int* i) { ldg_gather<8><<<sms * 4, 256>>>(p, i, NROWS); });
    report("ldg x8, 1024 thr/SM", us);
    us = time_layers(B, [&](u8* p, int* i) { ldg_gather<16><<<sms * 2, 256>>>(p, i, NROWS); });
    report("ldg x16, 512 thr/SM", us);
  }
  // rings, as the kernel loads: 32-row tiles, persistent CTAs (c per SM), S stages
  const int ntiles = NROWS / 32;
#define RING(L, S, W, C)                                                                                   \
  {                                                                                                        \
    const int sm = S * 32 * 592 + 64;                                                                      \
    CK(cudaFuncSetAttribute(ring_gather<L, S, W>, cudaFuncAttributeMaxDynamicSharedMemorySize, sm));       \
    float us = time_layers(B, [&](u8* p, int* i) { ring_gather<L, S, W><<<sms * C, 128, sm>>>(p, i, ntiles); }); \
    char nm[64];                                                                                           \
    snprintf(nm, sizeof nm, "%s S%d W%d %d CTA/SM", L == 1 ? "tma" : L == 2 ? "cpf" : "cpa", S, W, C);                           \
    report(nm, us);                                                                                        \
  }
  RING(1, 3, 4, 3)  // the kernel's pick: n32_s3_b3_tma4 (3 x 57 KB per SM)
  RING(1, 3, 1, 3)  // warp 0 issuing (round 4's LOADER 1)
  RING(1, 3, 2, 3)
  RING(1, 4, 4, 2)
  RING(1, 5, 4, 2)
  RING(1, 2, 4, 5)
  RING(0, 3, 4, 3)  // cp.async, 16 B per thread
  RING(0, 5, 4, 2)
  RING(0, 2, 4, 5)
  RING(2, 3, 4, 3)  // cp.async in byte order (LOADER 3 of the kernel)
  RING(2, 5, 4, 2)
  RING(2, 2, 4, 5)
  CK(cudaDeviceSynchronize());
  return 0;
}
