// MLA decode reading the FP8 (e4m3) KV pool directly: BF16 q, FP8 KV rows [N, 576] (512 latent + 64 rope),
// per-tensor scale, BF16 output. No header, no library: nvcc, sm_90+ (TMA bulk copies; cvt e4m3x2 -> f16x2),
// mma.sync m16n8k16 only, so one source serves sm_90a and sm_120. The kernels a host launches and nothing else:
// the research variants and their record are in lab/fp8_mla_decode/ (not installed).
//
// Schedule (length-aware, computed on the device, static grid: a CUDA graph replays it for any lengths).
// The live rows of the batch laid end to end (kv_indptr is their prefix sum) are cut into gridDim.y equal chunks
// (at least min_rows each, a multiple of the tile); CTA c reads chunk c, which may cover the end of one request,
// whole requests and the start of another: one segment per request it touches, each reduced to a partial
// (16 heads x 512, its log-sum-exp) in slot c + b (injective: a CTA's requests come after the previous CTA's).
// A request inside one chunk writes its BF16 output directly; the others are combined by fp8_mla_merge, which
// finds each request's slots from kv_indptr by the same rule. So every CTA reads the same number of rows
// whatever the mix of lengths (FlashMLA's tile-scheduler idea, here without a metadata pass: the prefix sum is
// kv_indptr itself), and the grid is one wave of CTAs.
//
// One segment, 16 heads, 4 warps. Per tile of BLOCK_N rows:
//   * the rows are gathered into a STAGES-deep ring of padded rows (592 B: every fragment read below is free
//     of bank conflicts) by TMA bulk copies, one per row, issued by all four warps (a quarter of the rows each);
//   * S = Q K^T is split over the 576 dims: warp w owns dims [144w, 144w+144) (its q fragments sit in 36
//     registers, pre-scaled by sm_scale * kv_scale * log2(e), as fp16); the four partial S tiles are summed
//     through shared memory;
//   * O += P V is split over the 512 output dims: warp w owns [128w, 128w+128) (64 fp32 accumulators);
//   * each FP8 byte is converted once for S and once for P V (cvt.rn.f16x2.e4m3x2: exact), in registers,
//     straight from the padded FP8 rows: no BF16 copy of any row anywhere.
// Operand orders are permuted so that each thread's fragment is 4 (S) or 16 (P V) contiguous bytes of one row;
// the same permutation is applied to q (S) and undone on the output (P V).

#define DQK 576
#define DV 512
#define ROW 592            // padded shared-memory row (bytes): 576 + 16
#define NWARPS 4
#define SDIMS 144          // S dims per warp (576 / 4)
#define VDIMS 128          // output dims per warp (512 / 4)
#define NEG_INF __int_as_float(0xff800000)

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef long long i64;

__device__ __forceinline__ u32 f8x2_to_f16x2(u32 two_bytes) {
  u32 r;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}" : "=r"(r) : "r"(two_bytes));
  return r;
}

__device__ __forceinline__ u32 f8x2_hi_to_f16x2(u32 four_bytes) {
  u32 r;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;\n}" : "=r"(r) : "r"(four_bytes));
  return r;
}

__device__ __forceinline__ u32 pack_f16(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

__device__ __forceinline__ float ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void mma16816(float* c, const u32* a, u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// The TMA engine's 1-D bulk copy (sm_90+): one instruction moves a whole 576-byte row into shared memory and
// counts its bytes on the stage's mbarrier.
__device__ __forceinline__ void mbar_init(unsigned long long* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_inval(unsigned long long* bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(unsigned long long* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned long long* bar, u32 parity) {
  u32 done = 0;
  while (!done)
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
}

__device__ __forceinline__ void bulk_row(void* dst, const void* src, u32 bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ float bf16_to_f32(u32 bits16) { return __int_as_float((int)(bits16 << 16)); }

// A row in two parts: the loaded id (a page id for page > 1) and the offset in the page, kept apart so that
// nothing consumes the loaded id until its copy is issued a tile later (an i64 sign extension right after the
// load made every issuing warp wait out a DRAM latency per tile: lab/fp8_mla_decode/NOTES.md, round 7).
struct Slot {
  int id, sub;
};

__device__ __forceinline__ Slot slot_load(const int* ids, i64 start, i64 tok, int page, bool valid) {
  Slot r = {0, 0};
  if (valid) {
    if (page == 1) {
      r.id = __ldg(ids + start + tok);
    } else {
      r.id = __ldg(ids + start + tok / page);
      r.sub = (int)(tok % page);
    }
  }
  return r;
}

__device__ __forceinline__ i64 slot_row(Slot s, int page) { return (i64)s.id * page + s.sub; }

// ---- the schedule: the same arithmetic in the decode kernel and the merge ----
// Work is counted in positions: request b starts at position pos(b) = rows before it + b x ovh, and its rows sit at
// pos(b) + ovh .. pos(b) + ovh + rows(b) - 1 (rows in kv_indptr's unit times page: page 1 live rows; pages, page
// slots, at most page - 1 more than the tokens). ovh charges each request the fixed cost of a segment (its prologue,
// the ring's fill and the partial's write) in rows, so that a CTA that meets many short requests reads fewer rows.
// Chunk: the even share of the grid, at least min_rows (short batches: fewer, longer chunks, since each costs a
// prologue and a partial), rounded up to the tile.
__device__ __forceinline__ i64 sched_chunk(i64 total, int ctas, int min_rows, int block_n) {
  i64 c = (total + ctas - 1) / ctas;
  if (c < min_rows) c = min_rows;
  return (c + block_n - 1) / block_n * block_n;
}

__device__ __forceinline__ i64 req_pos(const int* __restrict__ indptr, int b, i64 base, int page, int ovh) {
  return ((i64)__ldg(indptr + b) - base) * page + (i64)b * ovh;
}

// The two forms of the schedule, picked on the device by both kernels from the same numbers. Global (above): the
// batch's positions cut into equal chunks. Per request (split): each request cut into its own n = ctas / batch equal
// parts of per(b) = its rows / n (at least min_rows, whole tiles), CTA c reading part c % n of request c / n - the
// v0.5 grid, which has no CTA reading two requests and no merge when n is 1. The global form balances ragged batches;
// on a uniform one it makes every request cross a chunk boundary, so that every CTA reads two segments and every
// request needs the merge (H100: 256 x 8K 7% slower). The split form is taken when its longest part plus one
// segment's cost is at most the global chunk plus the merge's cost (SCHED_MERGE_ROWS: ~10 us of the merge at a
// CTA's share of the bandwidth, ~19 rows/us on an H100).
#define SCHED_MERGE_ROWS 512
struct Sched {
  i64 total, chunk;  // global form
  int split;         // 0: global; else n, parts per request
};

__device__ __forceinline__ i64 split_per(i64 rows, int n, int min_rows, int block_n) {
  i64 p = (rows + n - 1) / n;
  if (p < min_rows) p = min_rows;
  return (p + block_n - 1) / block_n * block_n;
}

// every thread of the CTA calls it (a CTA-wide reduction of the longest request)
__device__ __forceinline__ Sched sched_of(const int* __restrict__ indptr, int batch, int page, int ctas,
                                          int min_rows, int block_n, int ovh) {
  __shared__ int longest;
  if (threadIdx.x == 0) longest = 0;
  __syncthreads();
  int mine = 0;
  for (int i = threadIdx.x; i < batch; i += blockDim.x) mine = max(mine, __ldg(indptr + i + 1) - __ldg(indptr + i));
  atomicMax(&longest, mine);
  __syncthreads();
  Sched r;
  const i64 base = __ldg(indptr);
  r.total = req_pos(indptr, batch, base, page, ovh);
  r.chunk = sched_chunk(r.total, ctas, min_rows, block_n);
  const int n = ctas / batch;
  r.split = 0;
  if (n >= 1 && split_per((i64)longest * page, n, min_rows, block_n) + ovh <= r.chunk + SCHED_MERGE_ROWS) r.split = n;
  return r;
}

// PIPE: how the warps meet per tile. 0: two CTA barriers (one before the tile, which also frees the stage
// refilled next, one after the partial S tiles are written). 1: one CTA barrier, after the partial S tiles are
// written (double-buffered, so the next tile's writes cannot overtake this tile's reads); the stage of the tile
// before is free once every warp has passed it, so the refill is issued right after it.
// LAZY: the O rescale is skipped when no row maximum of the warp moved (exact: the factor is then 1).
// XCH (PIPE 1, 64-row tiles): how the four warps' partial S tiles become S. 0: every warp sums all four for every
// row. 2: warp w sums and keeps its 16 rows and runs the softmax on them alone (8 ex2 instead of 32): the row
// maxima cross warps through shared memory (a second barrier), each warp writes its P fragment (kp = w) and reads
// the other three after a third barrier; each warp's running sum covers its own rows, the four added at the end.
//
// One segment: rows [lo, hi) of request b (ids from ids[start]), 16 heads from h0. Writes the BF16 output
// (direct) or the partial and its log-sum-exp at slot row `prow` (part[(prow + h) * 512], lse[prow + h]).
// first: the ring's mbarriers are initialised (else invalidated and initialised again: the CTA's earlier
// segment is over, every wait and copy of it complete, and all threads have met since).
template <int BLOCK_N, int STAGES, int LAZY, int PIPE, int XCH>
__device__ __forceinline__ void segment(const u16* __restrict__ q, const u8* __restrict__ pool,
                                        const int* __restrict__ ids, i64 start, int b, i64 lo, i64 hi, int h0,
                                        float* __restrict__ part, float* __restrict__ lse, i64 prow,
                                        u16* __restrict__ out, float qk_scale, float out_scale, int heads,
                                        i64 pool_stride, i64 q_sb, i64 q_sh, i64 o_sb, i64 o_sh, int page,
                                        bool direct, bool first) {
  constexpr int NB = BLOCK_N / 8;  // 8-row blocks of S per tile
  constexpr int SX = BLOCK_N + 8;  // PIPE 0's partial-S row stride (floats): conflict-free
  // shared memory: the ring | partial S (PIPE 0: one [warp][16][SX] fp32 buffer; PIPE 1: two buffers of
  // [warp][n-block][lane] float4, each thread's own fragment) | mbarriers | XCH's area
  constexpr int SXB = PIPE ? 2 * NWARPS * NB * 32 * 16 : NWARPS * 16 * SX * 4;
  constexpr int BARB = PIPE ? 128 : 64;
  static_assert(XCH == 0 || (PIPE == 1 && BLOCK_N == 64), "XCH: CTA barriers (PIPE 1), one kp of rows per warp");
  constexpr int QJ = NB / NWARPS;  // XCH: 8-row blocks of S each warp sums
  constexpr int QROWS = BLOCK_N / NWARPS;  // rows each warp issues per tile
  extern __shared__ __align__(128) u8 smem[];
  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3, warp = tid >> 5;
  u8* ring = smem;
  float* sx = (float*)(smem + STAGES * BLOCK_N * ROW);
  float4* sxf = (float4*)(smem + STAGES * BLOCK_N * ROW);
  unsigned long long* bars = (unsigned long long*)(smem + STAGES * BLOCK_N * ROW + SXB);
  u8* xarea = smem + STAGES * BLOCK_N * ROW + SXB + BARB;
  float* xmax = (float*)xarea;                    // XCH 2: row maxima / sums [4 warps][16 heads]
  uint4* xp = (uint4*)(xarea + NWARPS * 16 * 4);  // XCH 2: P fragments [4 warps][32 lanes]
  const int ntiles = hi > lo ? (int)((hi - lo + BLOCK_N - 1) / BLOCK_N) : 0;

  // q fragments for this warp's 144 dims, in the permuted k order (see the header)
  u32 qf[SDIMS / 16][4];
#pragma unroll
  for (int kk = 0; kk < SDIMS / 16; ++kk) {
    const int d = warp * SDIMS + kk * 16 + 4 * t;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = h0 + g + 8 * r;
      uint2 v = make_uint2(0u, 0u);
      if (h < heads) v = *(const uint2*)(q + b * q_sb + h * q_sh + d);
      qf[kk][r] = pack_f16(bf16_to_f32(v.x & 0xffff) * qk_scale, bf16_to_f32(v.x >> 16) * qk_scale);
      qf[kk][2 + r] = pack_f16(bf16_to_f32(v.y & 0xffff) * qk_scale, bf16_to_f32(v.y >> 16) * qk_scale);
    }
  }

  if (tid == 0)
    for (int st = 0; st < STAGES; ++st) {
      if (!first) mbar_inval(&bars[st]);
      mbar_init(&bars[st], 1);
    }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();

  // The gather: lane l < BLOCK_N / 4 of warp w issues row w * BLOCK_N / 4 + l of each tile. A row past the
  // segment's end copies the segment's first row instead (finite, and masked out of S below), so every stage
  // always receives BLOCK_N whole rows. Slots are loaded one tile ahead.
  Slot nslot;
  auto load_slots = [&](int tile) {
    i64 tok = lo + (i64)tile * BLOCK_N + warp * QROWS + lane;
    if (tok >= hi) tok = lo;
    nslot = slot_load(ids, start, tok, page, tile < ntiles && lane < QROWS);
  };
  auto issue = [&](int tile) {
    u8* stage = ring + (tile % STAGES) * BLOCK_N * ROW;
    if (tid == 0) mbar_expect_tx(&bars[tile % STAGES], BLOCK_N * DQK);
    if (lane < QROWS)
      bulk_row(stage + (warp * QROWS + lane) * ROW, pool + slot_row(nslot, page) * pool_stride, DQK,
               &bars[tile % STAGES]);
  };

  load_slots(0);
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < ntiles) issue(st);
    load_slots(st + 1);
  }

  float o[VDIMS / 8][4];
#pragma unroll
  for (int j = 0; j < VDIMS / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;

  for (int i = 0; i < ntiles; ++i) {
    mbar_wait(&bars[i % STAGES], (i / STAGES) & 1);
    if (PIPE == 0) {
      __syncthreads();  // tile i visible to all; every warp is done with tile i-1's stage and partials
      if (i + STAGES - 1 < ntiles) issue(i + STAGES - 1);
      load_slots(i + STAGES);
    }
    const u8* tile = ring + (i % STAGES) * BLOCK_N * ROW;

    // partial S over this warp's dims
    float sacc[NB][4];
#pragma unroll
    for (int j = 0; j < NB; ++j) sacc[j][0] = sacc[j][1] = sacc[j][2] = sacc[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < SDIMS / 16; ++kk) {
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        const u32 w = *(const u32*)(tile + (8 * j + g) * ROW + warp * SDIMS + kk * 16 + 4 * t);
        mma16816(sacc[j], qf[kk], f8x2_to_f16x2(w), f8x2_hi_to_f16x2(w));
      }
    }
    if (PIPE == 0) {
      float* mine = sx + warp * 16 * SX;
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        *(float2*)(mine + g * SX + 8 * j + 2 * t) = make_float2(sacc[j][0], sacc[j][1]);
        *(float2*)(mine + (g + 8) * SX + 8 * j + 2 * t) = make_float2(sacc[j][2], sacc[j][3]);
      }
      __syncthreads();
#pragma unroll
      for (int w2 = 1; w2 < NWARPS; ++w2) {
        const float* other = sx + ((warp + w2) % NWARPS) * 16 * SX;
#pragma unroll
        for (int j = 0; j < NB; ++j) {
          const float2 a = *(const float2*)(other + g * SX + 8 * j + 2 * t);
          const float2 c = *(const float2*)(other + (g + 8) * SX + 8 * j + 2 * t);
          sacc[j][0] += a.x; sacc[j][1] += a.y; sacc[j][2] += c.x; sacc[j][3] += c.y;
        }
      }
    } else {
      // buffer i & 1: its last readers (tile i - 2) have all passed tile i - 1's barrier before any warp gets
      // here, so one barrier per tile suffices
      float4* buf = sxf + (i & 1) * NWARPS * NB * 32;
#pragma unroll
      for (int j = 0; j < NB; ++j) buf[(warp * NB + j) * 32 + lane] = make_float4(sacc[j][0], sacc[j][1], sacc[j][2], sacc[j][3]);
      __syncthreads();  // tile i's partials visible; every warp is done with tile i-1 (its stage is free)
      if (i + STAGES - 1 < ntiles) issue(i + STAGES - 1);
      load_slots(i + STAGES);
      if (XCH) {  // this warp's rows, summed over the four partials
#pragma unroll
        for (int qq = 0; qq < QJ; ++qq) {
          const int j = warp * QJ + qq;
          float4 acc = buf[j * 32 + lane];
#pragma unroll
          for (int w2 = 1; w2 < NWARPS; ++w2) {
            const float4 a = buf[(w2 * NB + j) * 32 + lane];
            acc.x += a.x; acc.y += a.y; acc.z += a.z; acc.w += a.w;
          }
          sacc[qq][0] = acc.x; sacc[qq][1] = acc.y; sacc[qq][2] = acc.z; sacc[qq][3] = acc.w;  // rows in [0, QJ)
        }
      } else {
#pragma unroll
        for (int w2 = 1; w2 < NWARPS; ++w2) {
          const float4* other = buf + ((warp + w2) % NWARPS) * NB * 32;
#pragma unroll
          for (int j = 0; j < NB; ++j) {
            const float4 a = other[j * 32 + lane];
            sacc[j][0] += a.x; sacc[j][1] += a.y; sacc[j][2] += a.z; sacc[j][3] += a.w;
          }
        }
      }
    }
    // online softmax (log2 domain: q carries log2(e)); rows g and g+8; the last tile may be cut. Over S's row
    // blocks r0 .. r0 + NR - 1, held in sacc[0, NR): all NB, or (XCH 2) this warp's QJ
    constexpr int NR = XCH == 2 ? QJ : NB;
    const int r0 = XCH == 2 ? warp * QJ : 0;
    const i64 base_tok = lo + (i64)i * BLOCK_N;
    float mx0 = NEG_INF, mx1 = NEG_INF;
    const bool cut = base_tok + BLOCK_N > hi;  // only the segment's last tile can be cut
#pragma unroll
    for (int j = 0; j < NR; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (cut && base_tok + 8 * (r0 + j) + 2 * t + e >= hi) { sacc[j][e] = NEG_INF; sacc[j][2 + e] = NEG_INF; }
        mx0 = fmaxf(mx0, sacc[j][e]);
        mx1 = fmaxf(mx1, sacc[j][2 + e]);
      }
    }
#pragma unroll
    for (int d = 1; d < 4; d *= 2) mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, d));
#pragma unroll
    for (int d = 1; d < 4; d *= 2) mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, d));
    if (XCH == 2) {  // the maxima per head across the four warps
      if (t == 0) { xmax[warp * 16 + g] = mx0; xmax[warp * 16 + g + 8] = mx1; }
      __syncthreads();
#pragma unroll
      for (int w2 = 0; w2 < NWARPS; ++w2) { mx0 = fmaxf(mx0, xmax[w2 * 16 + g]); mx1 = fmaxf(mx1, xmax[w2 * 16 + g + 8]); }
    }
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float a0 = ex2(m0 - mn0), a1 = ex2(m1 - mn1);
    m0 = mn0; m1 = mn1;
    float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
    for (int j = 0; j < NR; ++j) {
      sacc[j][0] = ex2(sacc[j][0] - mn0); sacc[j][1] = ex2(sacc[j][1] - mn0);
      sacc[j][2] = ex2(sacc[j][2] - mn1); sacc[j][3] = ex2(sacc[j][3] - mn1);
      ps0 += sacc[j][0] + sacc[j][1];
      ps1 += sacc[j][2] + sacc[j][3];
    }
    l0 = l0 * a0 + ps0;  // XCH 2: this warp's rows only, the four are added after the loop
    l1 = l1 * a1 + ps1;
    if (!LAZY || __any_sync(0xffffffffu, a0 != 1.f || a1 != 1.f)) {
#pragma unroll
      for (int j = 0; j < VDIMS / 8; ++j) { o[j][0] *= a0; o[j][1] *= a0; o[j][2] *= a1; o[j][3] *= a1; }
    }
    if (XCH == 2) {
      xp[warp * 32 + lane] = make_uint4(pack_f16(sacc[0][0], sacc[0][1]), pack_f16(sacc[0][2], sacc[0][3]),
                                        pack_f16(sacc[1][0], sacc[1][1]), pack_f16(sacc[1][2], sacc[1][3]));
      __syncthreads();  // every warp's P fragment (kp = its rows)
    }

    // O += P V over this warp's 128 output dims; P's k order is S's column order (16kp + 2t + e, +8)
#pragma unroll
    for (int kp = 0; kp < BLOCK_N / 16; ++kp) {
      u32 pa[4];
      if (XCH == 2) {
        const uint4 v = xp[kp * 32 + lane];
        pa[0] = v.x; pa[1] = v.y; pa[2] = v.z; pa[3] = v.w;
      } else {
        pa[0] = pack_f16(sacc[2 * kp][0], sacc[2 * kp][1]);
        pa[1] = pack_f16(sacc[2 * kp][2], sacc[2 * kp][3]);
        pa[2] = pack_f16(sacc[2 * kp + 1][0], sacc[2 * kp + 1][1]);
        pa[3] = pack_f16(sacc[2 * kp + 1][2], sacc[2 * kp + 1][3]);
      }
      const u8* rp = tile + (16 * kp + 2 * t) * ROW + warp * VDIMS + 16 * g;
      const uint4 w0 = *(const uint4*)(rp);
      const uint4 w1 = *(const uint4*)(rp + ROW);
      const uint4 w2 = *(const uint4*)(rp + 8 * ROW);
      const uint4 w3 = *(const uint4*)(rp + 9 * ROW);
      const u32 x0[4] = {w0.x, w0.y, w0.z, w0.w}, x1[4] = {w1.x, w1.y, w1.z, w1.w};
      const u32 x2[4] = {w2.x, w2.y, w2.z, w2.w}, x3[4] = {w3.x, w3.y, w3.z, w3.w};
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        // byte i of word a of a row is output dim 128 w + 16 g + 4 a + i, i.e. n-block 4 a + i, column g
        const u32 lo01 = prmt(x0[a], x1[a], 0x5140), hi01 = prmt(x0[a], x1[a], 0x7362);
        const u32 lo23 = prmt(x2[a], x3[a], 0x5140), hi23 = prmt(x2[a], x3[a], 0x7362);
        mma16816(o[4 * a + 0], pa, f8x2_to_f16x2(lo01), f8x2_to_f16x2(lo23));
        mma16816(o[4 * a + 1], pa, f8x2_hi_to_f16x2(lo01), f8x2_hi_to_f16x2(lo23));
        mma16816(o[4 * a + 2], pa, f8x2_to_f16x2(hi01), f8x2_to_f16x2(hi23));
        mma16816(o[4 * a + 3], pa, f8x2_hi_to_f16x2(hi01), f8x2_hi_to_f16x2(hi23));
      }
    }
  }

  // rows g (half 0) and g + 8 (half 1): the thread holds output dims 128 w + 32 t + 16 e + j, j = 0..15
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if (XCH == 2) {  // each warp summed its own rows: add the four (every warp passed the last tile's reads of xmax)
    if (t == 0) { xmax[warp * 16 + g] = l0; xmax[warp * 16 + g + 8] = l1; }
    __syncthreads();
    l0 = xmax[g] + xmax[16 + g] + xmax[32 + g] + xmax[48 + g];
    l1 = xmax[8 + g] + xmax[24 + g] + xmax[40 + g] + xmax[56 + g];
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int h = h0 + g + 8 * half;
    if (h >= heads) continue;
    const float l = half ? l1 : l0, m = half ? m1 : m0;
    const bool empty = ntiles == 0 || !(l > 0.f);
    const float inv = empty ? 0.f : out_scale / l;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int d = warp * VDIMS + 32 * t + 16 * e;
      if (direct) {
        u32 pk[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) pk[j] = pack_bf16(o[2 * j][2 * half + e] * inv, o[2 * j + 1][2 * half + e] * inv);
        uint4* dst = (uint4*)(out + b * o_sb + h * o_sh + d);
        dst[0] = make_uint4(pk[0], pk[1], pk[2], pk[3]);
        dst[1] = make_uint4(pk[4], pk[5], pk[6], pk[7]);
      } else if (!empty) {
        float4* dst = (float4*)(part + (prow + h) * DV + d);
#pragma unroll
        for (int j = 0; j < 4; ++j)
          dst[j] = make_float4(o[4 * j][2 * half + e] * inv, o[4 * j + 1][2 * half + e] * inv,
                               o[4 * j + 2][2 * half + e] * inv, o[4 * j + 3][2 * half + e] * inv);
      }
    }
    if (!direct && warp == 0 && t == 0) lse[prow + h] = empty ? NEG_INF : m + __log2f(l);
  }
}

// The decode kernel: grid (head blocks of 16, ctas, 1), 128 threads. kv_indptr [batch + 1] (rows, or pages for
// page > 1 with lens [batch] the tokens), ids the pool rows or pages; part [(ctas + batch) x heads x 512] and
// lse [(ctas + batch) x heads] fp32 (slot c + b, see the header); out [batch, heads, 512] BF16.
template <int BLOCK_N, int STAGES, int LAZY, int PIPE, int XCH>
__device__ __forceinline__ void decode(const u16* __restrict__ q, const u8* __restrict__ pool,
                                       const int* __restrict__ indptr, const int* __restrict__ ids,
                                       const int* __restrict__ lens, float* __restrict__ part,
                                       float* __restrict__ lse, u16* __restrict__ out, float qk_scale,
                                       float out_scale, int heads, i64 pool_stride, i64 q_sb, i64 q_sh, i64 o_sb,
                                       i64 o_sh, int batch, int page, int min_rows, int ovh) {
  const int c = blockIdx.y, ctas = gridDim.y, h0 = blockIdx.x * 16;
  // the merge may be launched now (programmatic dependent launch, _cuda.PDL): its CTAs take the SMs this grid
  // leaves idle and wait in griddepcontrol.wait until this grid is complete; without PDL both are no-ops
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const i64 base = indptr[0];
  const Sched sc = sched_of(indptr, batch, page, ctas, min_rows, BLOCK_N, ovh);
  if (c == 0 && blockIdx.x == 0 && threadIdx.x == 0) {  // the form, for the merge (it runs after this kernel)
    int* meta = (int*)(lse + (i64)(ctas + batch) * heads);
    meta[0] = sc.split;
    meta[1] = (int)(sc.chunk & 0xffffffff);
    meta[2] = (int)(sc.chunk >> 32);
  }
  if (sc.split) {
    const int b = c / sc.split, s = c % sc.split;
    if (b >= batch) return;
    const i64 rows = ((i64)indptr[b + 1] - indptr[b]) * page;
    const i64 per = split_per(rows, sc.split, min_rows, BLOCK_N);
    const i64 lo = (i64)s * per;
    if (lo >= rows && s > 0) return;  // beyond the request's parts: no slot of it is read
    i64 hi = lo + per < rows ? lo + per : rows;
    if (page != 1) {
      const i64 n = lens[b];
      if (hi > n) hi = n;
    }
    segment<BLOCK_N, STAGES, LAZY, PIPE, XCH>(q, pool, ids, (i64)indptr[b], b, lo, hi, h0, part, lse,
                                              (i64)(c + b) * heads, out, qk_scale, out_scale, heads, pool_stride,
                                              q_sb, q_sh, o_sb, o_sh, page, per >= rows, true);
    return;
  }
  const i64 total = sc.total, chunk = sc.chunk;
  const i64 my_lo = (i64)c * chunk;
  if (my_lo >= total) return;  // no work: nothing reads this CTA's slots (the merge derives them the same way)
  const i64 my_hi = my_lo + chunk < total ? my_lo + chunk : total;
  // the request holding position my_lo: the last b with pos(b) <= my_lo, counted by the whole CTA, 128 entries a round
  int n_le = 0;
  for (int i0 = 0; i0 <= batch; i0 += blockDim.x) {
    const int i = i0 + (int)threadIdx.x;
    n_le += __syncthreads_count(i <= batch && req_pos(indptr, i, base, page, ovh) <= my_lo);
  }
  bool first = true;
  for (int b = n_le - 1; b < batch; ++b) {
    const i64 ps = req_pos(indptr, b, base, page, ovh);
    if (ps >= my_hi) break;
    const i64 r0 = ps + ovh, r1 = r0 + ((i64)indptr[b + 1] - indptr[b]) * page;  // the request's rows
    const i64 lo = (my_lo > r0 ? my_lo : r0) - r0;
    i64 hi = (my_hi < r1 ? my_hi : r1) - r0;
    if (hi <= lo) continue;  // only the request's overhead (or nothing of it) in this chunk
    if (page != 1) {
      const i64 n = lens[b];
      if (hi > n) hi = n;
    }
    const bool direct = r0 / chunk == (r1 - 1) / chunk;
    if (!first) __syncthreads();  // the earlier segment's shared memory and mbarriers are free
    segment<BLOCK_N, STAGES, LAZY, PIPE, XCH>(q, pool, ids, (i64)indptr[b], b, lo, hi, h0, part, lse,
                                              (i64)(c + b) * heads, out, qk_scale, out_scale, heads, pool_stride,
                                              q_sb, q_sh, o_sb, o_sh, page, direct, first);
    first = false;
  }
}

#define DEFINE_DECODE(NAME, BN, ST, MINB, LAZY, PIPE, XCH)                                                         \
  extern "C" __global__ void __launch_bounds__(128, MINB)                                                        \
      NAME(const u16* q, const u8* pool, const int* indptr, const int* ids, const int* lens, float* part,      \
           float* lse, u16* out, float qk_scale, float out_scale, int heads, i64 pool_stride, i64 q_sb, i64 q_sh, \
           i64 o_sb, i64 o_sh, int batch, int page, int min_rows, int ovh) {                                     \
    decode<BN, ST, LAZY, PIPE, XCH>(q, pool, indptr, ids, lens, part, lse, out, qk_scale, out_scale, heads,      \
                                    pool_stride, q_sb, q_sh, o_sb, o_sh, batch, page, min_rows, ovh);            \
  }

// name: rows per tile (n), ring depth (s), CTAs per SM the registers are held to (b); _1b one CTA barrier per
// tile (PIPE 1), _lz lazy rescale, _x2 each warp's softmax on its own rows (XCH 2); _tma4 PIPE 0.
// sm90 (112,768 B of shared memory, 2 CTAs per SM):
DEFINE_DECODE(fp8_mla_n64_s2_b2_1b_lz_x2, 64, 2, 2, 1, 1, 2)
// sm120 (48,640 B: two CTAs fit its ~100 KB per SM; no wgmma, no setmaxnreg used anywhere):
DEFINE_DECODE(fp8_mla_n32_s2_b2_tma4, 32, 2, 2, 0, 0, 0)

// The merge: grid (batch, HY, Z), 128 threads, Z in 1, 2, 4, 8 and HY heads / k (the host's pick: a small batch's
// few requests need more CTAs, a large batch's many need fewer: most of them only find that their request was
// written whole and return); CTA (b, y, z) combines the output dims [z D, z D + D), D = 512 / Z, of heads
// y k .. y k + k - 1. A request whose rows sit in one chunk was written by its CTA (nothing to do); an empty one gets
// zeros; the others combine slots first + b .. last + b by their log-sum-exps (base 2). Per head, the slots' weights
// are computed once into shared memory (all threads, one load each); then the threads form 128 / (D / 4) groups,
// group k summing slots k, k + groups, ... (each thread 4 dims: one float4) with 8 slots in flight per thread (a
// small batch's request has up to a CTA per slot), and the groups' sums are added through shared memory. An empty
// segment's slot (weight 0) is loaded but not used (its bytes are the workspace's). The decode leaves its schedule's
// form after the slots' log-sum-exps (lse[(ctas + batch) x heads ...] as ints: split, chunk's low and high words);
// the merge takes the same ctas, min_rows, block_n, ovh.
#define MERGE_MAX_SLOTS 2048
extern "C" __global__ void __launch_bounds__(128) fp8_mla_merge(const int* __restrict__ indptr,
                                                                const float* __restrict__ part,
                                                                const float* __restrict__ lse, u16* __restrict__ out,
                                                                int heads, i64 o_sb, i64 o_sh, int batch, int page,
                                                                int ctas, int min_rows, int block_n, int ovh) {
  __shared__ float wts[MERGE_MAX_SLOTS];
  __shared__ float4 red[128];
  __shared__ float wred[2][NWARPS];
  const int b = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hk = (heads + gridDim.y - 1) / gridDim.y, h_lo = blockIdx.y * hk;
  const int h_hi = h_lo + hk < heads ? h_lo + hk : heads;
  const int nq = DV / 4 / gridDim.z;             // float4s per CTA: 128, 64, 32 or 16
  const int groups = 128 / nq, grp = tid / nq, gl = tid % nq;
  const int d0 = 4 * nq * blockIdx.z;
  const i64 base = indptr[0];
  const i64 rows = ((i64)indptr[b + 1] - indptr[b]) * page;
  // launched early under PDL: everything below reads or writes what the decode wrote or writes (kv_indptr is
  // the step's input): wait for the decode grid to complete and its writes to be visible
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int* meta = (const int*)(lse + (i64)(ctas + batch) * heads);  // the decode's schedule form
  Sched sc;
  sc.split = meta[0];
  sc.chunk = (i64)(u32)meta[1] | ((i64)meta[2] << 32);
  if (rows <= 0) {
    for (int h = h_lo; h < h_hi; ++h)
      if (tid < nq) *(uint2*)(out + b * o_sb + h * o_sh + d0 + 4 * tid) = make_uint2(0u, 0u);
    return;
  }
  int c0, n;
  if (sc.split) {  // parts 0 .. n - 1 of request b: CTAs b * split + s
    const i64 per = split_per(rows, sc.split, min_rows, block_n);
    c0 = b * sc.split;
    n = (int)((rows + per - 1) / per);
  } else {
    const i64 r0 = req_pos(indptr, b, base, page, ovh) + ovh, r1 = r0 + rows;
    c0 = (int)(r0 / sc.chunk);
    n = (int)((r1 - 1) / sc.chunk) - c0 + 1;
  }
  if (n == 1) return;
  for (int h = h_lo; h < h_hi; ++h) {
    u16* dst = out + b * o_sb + h * o_sh + d0;
    if (h > h_lo) __syncthreads();  // the previous head's weights and sums are read
    const float* lrow = lse + (i64)(c0 + b) * heads + h;  // slot i's lse: lrow[i * heads]
    float m = NEG_INF;
    for (int i = tid; i < n; i += 128) m = fmaxf(m, lrow[(i64)i * heads]);
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
    if (lane == 0) wred[0][warp] = m;
    __syncthreads();
    m = fmaxf(fmaxf(wred[0][0], wred[0][1]), fmaxf(wred[0][2], wred[0][3]));
    float ws = 0.f;
    for (int i = tid; i < n; i += 128) {
      const float s = lrow[(i64)i * heads];
      const float w = s == NEG_INF ? 0.f : ex2(s - m);
      wts[i] = w;
      ws += w;
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) ws += __shfl_xor_sync(0xffffffffu, ws, d);
    if (lane == 0) wred[1][warp] = ws;
    __syncthreads();
    ws = wred[1][0] + wred[1][1] + wred[1][2] + wred[1][3];
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    const i64 sstride = (i64)heads * DV;
    const float* prow = part + ((i64)(c0 + b) * heads + h) * DV + d0 + 4 * gl;  // slot i: + i * sstride
    int i = grp;
    for (; i + 7 * groups < n; i += 8 * groups) {  // 8 slots per thread in flight
      float4 v[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = *(const float4*)(prow + (i64)(i + k * groups) * sstride);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float w = wts[i + k * groups];
        if (w != 0.f) { acc.x += w * v[k].x; acc.y += w * v[k].y; acc.z += w * v[k].z; acc.w += w * v[k].w; }
      }
    }
    for (; i < n; i += groups) {
      const float w = wts[i];
      if (w == 0.f) continue;
      const float4 v = *(const float4*)(prow + (i64)i * sstride);
      acc.x += w * v.x; acc.y += w * v.y; acc.z += w * v.z; acc.w += w * v.w;
    }
    red[tid] = acc;  // = red[grp * nq + gl]
    __syncthreads();
    if (tid < nq) {
      float4 s = red[tid];
      for (int k = 1; k < groups; ++k) {
        const float4 r = red[k * nq + tid];
        s.x += r.x; s.y += r.y; s.z += r.z; s.w += r.w;
      }
      const float inv = ws > 0.f ? 1.f / ws : 0.f;
      *(uint2*)(dst + 4 * tid) = make_uint2(pack_bf16(s.x * inv, s.y * inv), pack_bf16(s.z * inv, s.w * inv));
    }
  }
}
