// Split-KV MLA decode reading the FP8 (e4m3) KV pool directly: BF16 q, FP8 KV rows [N, 576]
// (512 latent + 64 rope), per-tensor scale, BF16 output. No header, no library: nvcc or NVRTC, sm_90+
// (TMA bulk copies; cvt e4m3x2 -> f16x2), mma.sync m16n8k16 only, so one source serves sm_90a and sm_120.
//
// One CTA = 16 heads x one split of one request, 4 warps. Per tile of BLOCK_N rows:
//   * the rows are gathered into a STAGES-deep ring of padded rows (592 B: every fragment read below is
//     free of bank conflicts), by TMA bulk copies (one per row, LOADER 1/2) or cp.async (LOADER 0);
//   * S = Q K^T is split over the 576 dims: warp w owns dims [144w, 144w+144) (its q fragments sit in
//     36 registers for the whole kernel, pre-scaled by sm_scale * kv_scale * log2(e) and held as fp16),
//     the four partial S tiles are summed through shared memory;
//   * O += P V is split over the 512 output dims: warp w owns [128w, 128w+128) (64 fp32 accumulators);
//   * each FP8 byte is converted once for S and once for P V (cvt.rn.f16x2.e4m3x2: exact), in
//     registers, straight from the padded FP8 rows: no BF16 copy of any row anywhere.
// Operand orders are permuted so that each thread's fragment is 4 (S) or 16 (P V) contiguous bytes
// of one row; the same permutation is applied to q (S) and undone on the output (P V).
// Lengths are read on the device (kv_indptr, or kv_lens for pages), so a CUDA graph replays for any.

#define DQK 576
#define DV 512
#define ROW 592            // padded shared-memory row (bytes): 576 + 16
#define NWARPS 4
#define SDIMS 144          // S dims per warp (576 / 4)
#define VDIMS 128          // output dims per warp (512 / 4)
#define NEG_INF __int_as_float(0xff800000)
#define PRODUCER_REGS 32   // PIPE 3: registers per producer thread after setmaxnreg
#define CONSUMER_REGS 224  // PIPE 3: per consumer thread; (32 + 224) x 128 threads x 2 CTAs = the SM's 65,536
#define PRODUCER_REGS_1 40   // PIPE 4 (one CTA per SM): producers give back to 40 registers per thread ...
#define CONSUMER_REGS_1 232  // ... and the two consumer warpgroups take 232: (2 x 232 + 40) x 128 = 64,512
// PIPE 3: how many producer warps arm a stage's "full" mbarrier. Each warp, for its own rows (one arrival and
// expect_tx each, before its copies): no copy can complete on a stage before its own bytes are expected.
// -DFP8_MLA_PIPE3_ONE_ARM: warp 4 alone arms the whole tile (round 8 as first timed: wrong outputs whenever two
// CTAs shared an SM, NOTES.md "Round 8, timed"), so the other warps' bytes could land before the expect_tx.
#ifdef FP8_MLA_PIPE3_ONE_ARM
#define PIPE3_ARMS 1
#else
#define PIPE3_ARMS NWARPS
#endif

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

// Two e4m3 bytes sitting in the high bytes of a word's halves (low bytes any) -> f16x2 on the integer pipe:
// sign stays, exponent and mantissa move down one bit. Exact, scaled by 2^-8 (the bias difference), which
// the caller folds into the output scale. Lets the conversion work share two pipes (cvt is 16/clk/SM).
__device__ __forceinline__ u32 f8hi_to_f16x2_alu(u32 x) {
  return (x & 0x80008000u) | ((x & 0x7F007F00u) >> 1);
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

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src, int src_bytes) {
  u32 d = (u32)__cvta_generic_to_shared(smem_dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(gmem_src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// The TMA engine's 1-D bulk copy (sm_90+): one instruction moves a whole 576-byte row into shared memory
// and counts its bytes on the stage's mbarrier.
__device__ __forceinline__ void mbar_init(unsigned long long* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
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

// A consumer warp's release of a stage (PIPE 2): one arrival (lane 0, after __syncwarp); release semantics order
// the warp's shared-memory reads of the stage before the producer's next bulk copy into it.
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// A barrier among the `count` threads that name it (PIPE 2: the four consumer warps, not the producer).
__device__ __forceinline__ void named_bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Hopper's register hand-over between warpgroups (sm_90a only; PIPE 3): the producer warpgroup gives registers
// back, the consumers take them. Elsewhere a no-op (PIPE 3 kernels are built for sm_90a alone, see the end), and
// with -DFP8_MLA_PIPE3_NO_SETMAXNREG (a diagnostic build: the consumers then spill under the 128-register cap).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(FP8_MLA_PIPE3_NO_SETMAXNREG)
#define FP8_MLA_SETMAXNREG 1
#endif
template <int N>
__device__ __forceinline__ void regs_dec() {
#if defined(FP8_MLA_SETMAXNREG)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void regs_inc() {
#if defined(FP8_MLA_SETMAXNREG)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

__device__ __forceinline__ void bulk_row(void* dst, const void* src, u32 bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ float bf16_to_f32(u32 bits16) { return __int_as_float((int)(bits16 << 16)); }

// The same row in two parts, for the loaders: the loaded id (a page id for page > 1) and the offset in the page.
// Kept apart so that nothing consumes the loaded id until its copy is issued a tile later. Round 7's Nsight
// Compute source counters (H200) found 18% of all warp stall samples on one instruction: the i64 sign extension
// right after the id's load, which made every issuing warp wait out a DRAM latency in every tile.
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

// the factor undoing the integer-pipe conversion's 2^-8 on n-block j (byte i = j % 4 of a word)
template <int VALU>
__device__ __forceinline__ float vscale(int j) {
  return (VALU == 1 || (VALU == 2 && (j & 3) < 2)) ? 256.f : 1.f;
}

// VALU: how the P V operand is converted: 0 all by cvt, 1 all on the integer pipe, 2 half each.
// SKIP (timing only, wrong results): bit 0 leaves out the S products, bit 1 the P V products, bit 2 the
// loads (the products then run on whatever the ring holds).
// LOADER: 0 cp.async (16 B per thread and copy; any sm_80+), 1 one bulk copy per row (TMA engine, sm_90+) issued
// by warp 0, 2 the same issued by all four warps (a quarter of the rows each: no warp carries extra work into
// the CTA barriers, where Nsight Compute found 44% of the warps' stall cycles with LOADER 1), 3 cp.async in the
// order of the bytes (thread t copies 16-byte chunks t, t + 128, ... of the tile's rows laid end to end, so a warp's
// copies are 512 contiguous bytes of at most two rows; each warp holds the tile's 32 slots, one per lane, and
// passes them round by shuffles): ~9 instructions per tile and thread where a bulk copy costs ~9 per row
// (ELECT / R2UR / UBLKCP, serialised over the issuing lanes), PIPE 0 only.
// QS: q fragments kept in shared memory (18 KB) instead of 36 registers, for more CTAs per SM.
// LAZY: the O rescale is skipped when no row maximum of the warp moved (exact: the factor is then 1).
// PIPE: how the warps meet per tile. 0: two CTA barriers (one before the tile, which also frees the stage
// refilled next, one after the partial S tiles are written). 1: one CTA barrier, after the partial S tiles
// are written (double-buffered, so the next tile's writes cannot overtake this tile's reads); the stage of
// the tile before is free once every warp has passed it, so the refill is issued right after it (LOADER 2).
// 2: warp specialised: a fifth warp (the producer) issues every bulk copy (one row per lane) as soon as the
// four consumer warps release the stage (an "empty" mbarrier per stage, one arrival per consumer warp);
// the consumers meet once per tile at a named barrier of 128 threads (bar.sync 1, 128), as in PIPE 1.
// 3: PIPE 2 with a producer WARPGROUP (256 threads): warp 4 + w issues rows w * BLOCK_N / 4 + lane (LOADER 2's
// split), so no consumer warp spends an instruction on a copy or an index load (round 7's Nsight Compute: the
// copy loop, ELECT / R2UR / UBLKCP serialised over the issuing lanes, ~20% of the pick's stall samples), and
// setmaxnreg hands the producers' registers to the consumers (PRODUCER_REGS + CONSUMER_REGS = 2 x 128: two CTAs
// of 256 threads per SM, the consumers at up to 224 registers). sm_90a only. MEASURED WRONG on the H200: outputs
// off whenever two such CTAs share an SM (right with one CTA per SM, and right without setmaxnreg): kept as the
// record of it (NOTES.md "Round 8, timed"); PIPE 4 is the design that holds.
// 4: PIPE 3 at one CTA per SM (384 threads, the register hand-over FA3 and FlashMLA use): two consumer warpgroups,
// each the four consumer warps of its own work item (split 2 x blockIdx.y + group of request blockIdx.z) with its
// own ring, partial-S buffers, mbarriers and named barrier; warps 8-11 the producers, two per group, each issuing
// 32 rows of every tile and arming the stage for them. sm_90a only.
// SACC: accumulator sets of the S product (2: even and odd k-steps into separate registers, summed after, so that
// each HMMA waits on the one two steps back: 8 independent chains per warp instead of 4).
// XCH (PIPE 1, 64-row tiles): how the four warps' partial S tiles become S. 0: every warp sums all four for every
// row (24 LDS.128 + 96 FADD per thread and tile). 1: reduce-scatter then all-gather: warp w sums rows 16w..16w+15
// of the four partials (8 LDS.128, 24 FADD) and writes them, a second CTA barrier, every warp reads the 64 summed
// rows (8 LDS.128). 2: warp w keeps its 16 summed rows and runs the softmax on them alone (8 ex2 instead of 32):
// the row maxima cross warps through shared memory (a second barrier), each warp writes its P fragment (kp = w)
// and reads the other three after a third barrier; each warp's running sum covers its own rows and the four are
// added at the end.
template <int BLOCK_N, int STAGES, int VALU, int SKIP, int LOADER, int QS, int LAZY, int PIPE, int SACC, int XCH = 0>
__device__ __forceinline__ void split_body(const u16* __restrict__ q, const u8* __restrict__ pool,
                                           const int* __restrict__ indptr, const int* __restrict__ ids,
                                           const int* __restrict__ lens, float* __restrict__ part,
                                           float* __restrict__ lse, u16* __restrict__ out, float qk_scale,
                                           float out_scale, int heads, i64 pool_stride, i64 q_sb, i64 q_sh,
                                           i64 o_sb, i64 o_sh, int n_splits, int page, int direct) {
  constexpr int NB = BLOCK_N / 8;            // 8-row blocks of S per tile
  constexpr int TPR = 128 / BLOCK_N;         // threads gathering one row
  constexpr int CHUNKS = DQK / 16 / TPR;     // 16-byte copies per thread per tile
  constexpr int SX = BLOCK_N + 8;            // partial-S row stride (floats): conflict-free
  // shared memory: the ring | partial S (PIPE 0: one [warp][16][SX] fp32 buffer; PIPE 1/2: two buffers of
  // [warp][n-block][lane] float4, each thread's own fragment: conflict-free and no padding) | mbarriers | q (QS)
  constexpr int SXB = PIPE ? 2 * NWARPS * NB * 32 * 16 : NWARPS * 16 * SX * 4;
  constexpr int BARB = PIPE ? 128 : 64;
  static_assert(PIPE == 0 || 2 * STAGES * 8 <= BARB, "mbarrier area");
  static_assert(PIPE != 2 || LOADER == 1, "PIPE 2: the producer warp issues every row");
  static_assert(PIPE != 3 || LOADER == 2, "PIPE 3: each producer warp issues a quarter of the rows");
  static_assert(PIPE != 4 || (LOADER == 2 && BLOCK_N == 64), "PIPE 4: two producer warps per group, 32 rows each");
  static_assert(XCH == 0 || (PIPE == 1 && BLOCK_N == 64), "XCH: CTA barriers (PIPE 1), one kp of rows per warp");
  constexpr int QJ = NB / NWARPS;  // XCH: 8-row blocks of S each warp sums
  static_assert(PIPE != 1 || LOADER == 1 || LOADER == 2, "PIPE 1: the tile is waited for on its mbarrier, not by cp.async groups");
  static_assert(LOADER != 3 || (BLOCK_N == 32 && PIPE == 0), "LOADER 3: one slot per lane, cp.async groups");
  constexpr bool CPA = LOADER == 0 || LOADER == 3;  // completion by cp.async groups, not mbarriers
  extern __shared__ __align__(128) u8 smem_all[];
  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
  // PIPE 4: warps 0-7 consume (group tid / 128, warp within it tid / 32 % 4), warps 8-11 produce (group
  // (warp - 8) / 2); each group owns one slice of shared memory and one work item. Elsewhere one group.
  const int raw_warp = tid >> 5;
  const int grp = PIPE == 4 ? (raw_warp < 2 * NWARPS ? raw_warp / NWARPS : (raw_warp - 2 * NWARPS) / 2) : 0;
  const int warp = PIPE == 4 && raw_warp < 2 * NWARPS ? raw_warp % NWARPS : raw_warp;
  u8* smem = smem_all + grp * (STAGES * BLOCK_N * ROW + SXB + BARB + (QS ? NWARPS * (SDIMS / 16) * 32 * 16 : 0));
  u8* ring = smem;
  float* sx = (float*)(smem + STAGES * BLOCK_N * ROW);
  float4* sxf = (float4*)(smem + STAGES * BLOCK_N * ROW);

  const int s = PIPE == 4 ? 2 * blockIdx.y + grp : blockIdx.y, b = blockIdx.z, h0 = blockIdx.x * 16;
  const i64 start = indptr[b];
  const i64 length = page == 1 ? (i64)indptr[b + 1] - start : (i64)lens[b];
  const i64 per = ((length + n_splits - 1) / n_splits + BLOCK_N - 1) / BLOCK_N * BLOCK_N;
  const i64 lo = (i64)s * per;  // PIPE 4: a group past n_splits gets lo >= length, no tiles, and writes nothing
  const i64 hi = lo + per < length ? lo + per : length;
  const int ntiles = hi > lo ? (int)((hi - lo + BLOCK_N - 1) / BLOCK_N) : 0;

  unsigned long long* bars = (unsigned long long*)(smem + STAGES * BLOCK_N * ROW + SXB);
  unsigned long long* empty = bars + STAGES;  // PIPE 2 and 3
  if (PIPE >= 2) {
    if (PIPE == 4 ? tid % (32 * NWARPS) == 0 && tid < 64 * NWARPS : tid == 0)  // each group's own
      for (int st = 0; st < STAGES; ++st) {
        mbar_init(&bars[st], PIPE == 4 ? 2 : PIPE == 3 ? PIPE3_ARMS : 1);
        mbar_init(&empty[st], NWARPS);
      }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncthreads();  // the only CTA-wide barrier of PIPE 2 and 3: the roles split below
    if (warp >= NWARPS) {
      // the producers. PIPE 2, one warp: lane l gathers row l (and l + 32, ...) of every tile. PIPE 3, a warpgroup
      // that first gives its registers to the consumers: warp 4 + w gathers rows w * BLOCK_N / 4 + lane. The slots
      // of tile t + 1 are looked up before waiting for tile t's stage, so the index load's latency is off the
      // critical path.
      if (PIPE == 3) regs_dec<PRODUCER_REGS>();
      if (PIPE == 4) regs_dec<PRODUCER_REGS_1>();
      constexpr int PR = PIPE >= 3 ? 1 : (BLOCK_N + 31) / 32;          // rows per lane
      constexpr int QR = PIPE == 3 ? BLOCK_N / NWARPS : PIPE == 4 ? BLOCK_N / 2 : BLOCK_N;  // rows per producer warp
      auto row_of = [&](int k) {
        return PIPE == 3 ? (warp - NWARPS) * QR + lane : PIPE == 4 ? (warp & 1) * QR + lane : lane + 32 * k;
      };
      auto mine = [&](int k) { return PIPE >= 3 ? lane < QR : lane + 32 * k < BLOCK_N; };
      auto slot_at = [&](int tile, int k) -> Slot {
        i64 tok = lo + (i64)tile * BLOCK_N + row_of(k);
        if (tok >= hi) tok = lo;  // past the split's end: the split's first row (finite, masked out of S)
        return slot_load(ids, start, tok, page, tile < ntiles && mine(k));
      };
      Slot cur[PR];
#pragma unroll
      for (int k = 0; k < PR; ++k) cur[k] = slot_at(0, k);
      for (int tl = 0; tl < ntiles && !(SKIP & 4); ++tl) {
        const int st = tl % STAGES;
        Slot nxt[PR];
#pragma unroll
        for (int k = 0; k < PR; ++k) nxt[k] = slot_at(tl + 1, k);
        if (tl >= STAGES) mbar_wait(&empty[st], ((tl / STAGES) - 1) & 1);  // tile tl - STAGES released
        if ((PIPE != 3 || PIPE3_ARMS == NWARPS || warp == NWARPS) && lane == 0)
          mbar_expect_tx(&bars[st], PIPE == 4 ? QR * DQK : PIPE == 3 ? BLOCK_N / PIPE3_ARMS * DQK : BLOCK_N * DQK);
        __syncwarp();
#pragma unroll
        for (int k = 0; k < PR; ++k) {
          if (mine(k))
            bulk_row(ring + st * BLOCK_N * ROW + row_of(k) * ROW, pool + slot_row(cur[k], page) * pool_stride, DQK,
                     &bars[st]);
          cur[k] = nxt[k];
        }
      }
      return;
    }
    if (PIPE == 3) regs_inc<CONSUMER_REGS>();
    if (PIPE == 4) regs_inc<CONSUMER_REGS_1>();
  }

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

  uint4* sq = (uint4*)(smem + STAGES * BLOCK_N * ROW + SXB + BARB);
  // XCH's area after q's: the summed S rows [NB][32 lanes] float4 (1), or the row maxima / sums [4 warps][16 heads]
  // then the P fragments [4 warps][32 lanes] uint4 (2)
  u8* xarea = smem + STAGES * BLOCK_N * ROW + SXB + BARB + (QS ? NWARPS * (SDIMS / 16) * 32 * 16 : 0);
  float4* xred = (float4*)xarea;
  float* xmax = (float*)xarea;
  uint4* xp = (uint4*)(xarea + NWARPS * 16 * 4);
  if (QS) {
#pragma unroll
    for (int kk = 0; kk < SDIMS / 16; ++kk)
      sq[(warp * (SDIMS / 16) + kk) * 32 + lane] = make_uint4(qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
    __syncwarp();
  }

  // The gather. A row past the split's end copies the split's first row instead (finite, and masked out of
  // S below), so every stage always receives BLOCK_N whole rows. Slots are loaded one tile ahead.
  // LOADER 0: every thread copies part of one row; LOADER 1: warp 0's lanes each issue whole rows; LOADER 2:
  // lane l < BLOCK_N / 4 of warp w issues row w * BLOCK_N / 4 + l.
  if ((LOADER == 1 || LOADER == 2) && PIPE < 2) {
    if (tid == 0)
      for (int st = 0; st < STAGES; ++st) mbar_init(&bars[st], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncthreads();
  }
  constexpr int RPL = LOADER == 1 ? (BLOCK_N + 31) / 32 : 1;  // rows per issuing lane
  constexpr int QROWS = BLOCK_N / NWARPS;                     // LOADER 2: rows per warp
  const int my_row = tid / TPR, my_part = tid % TPR;
  const bool issuer = LOADER != 1 || warp == 0;
  Slot nslot[RPL];
  auto load_slots = [&](int tile) {
#pragma unroll
    for (int k = 0; k < RPL; ++k) {
      const int row = LOADER == 1 || LOADER == 3 ? lane + 32 * k : LOADER == 2 ? warp * QROWS + lane : my_row;
      i64 tok = lo + (i64)tile * BLOCK_N + row;
      if (tok >= hi) tok = lo;
      const bool mine = LOADER == 2 ? lane < QROWS : row < BLOCK_N;
      nslot[k] = slot_load(ids, start, tok, page, tile < ntiles && mine);
    }
  };
  auto issue = [&](int tile) {
    u8* stage = ring + (tile % STAGES) * BLOCK_N * ROW;
    if (LOADER == 0) {
      const u8* src = pool + slot_row(nslot[0], page) * pool_stride + my_part * CHUNKS * 16;
      u8* dst = stage + my_row * ROW + my_part * CHUNKS * 16;
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) cp_async16(dst + 16 * c, src + 16 * c, 16);
    } else if (LOADER == 3) {
#pragma unroll
      for (int k = 0; k < BLOCK_N * (DQK / 16) / 128; ++k) {
        const int e = tid + 128 * k, row = e / (DQK / 16), chunk = e - row * (DQK / 16);
        Slot sl;
        sl.id = __shfl_sync(0xffffffffu, nslot[0].id, row);
        sl.sub = page == 1 ? 0 : __shfl_sync(0xffffffffu, nslot[0].sub, row);
        cp_async16(stage + row * ROW + chunk * 16, pool + slot_row(sl, page) * pool_stride + chunk * 16, 16);
      }
    } else if (LOADER == 2) {
      if (tid == 0) mbar_expect_tx(&bars[tile % STAGES], BLOCK_N * DQK);
      if (lane < QROWS)
        bulk_row(stage + (warp * QROWS + lane) * ROW, pool + slot_row(nslot[0], page) * pool_stride, DQK,
                 &bars[tile % STAGES]);
    } else {
      if (lane == 0) mbar_expect_tx(&bars[tile % STAGES], BLOCK_N * DQK);
      __syncwarp();
#pragma unroll
      for (int k = 0; k < RPL; ++k) {
        const int row = lane + 32 * k;
        if (row < BLOCK_N)
          bulk_row(stage + row * ROW, pool + slot_row(nslot[k], page) * pool_stride, DQK, &bars[tile % STAGES]);
      }
    }
  };

  if (issuer && PIPE < 2) load_slots(0);
#pragma unroll
  for (int st = 0; st < STAGES - 1 && PIPE < 2; ++st) {
    if (issuer && !(SKIP & 4)) {
      if (st < ntiles) issue(st);
      load_slots(st + 1);
    }
    if (CPA) cp_async_commit();
  }

  float o[VDIMS / 8][4];
#pragma unroll
  for (int j = 0; j < VDIMS / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;

  for (int i = 0; i < ntiles; ++i) {
    if (CPA) cp_async_wait<STAGES - 2>();
    else if (!(SKIP & 4)) mbar_wait(&bars[i % STAGES], (i / STAGES) & 1);
    if (PIPE == 0) {
      __syncthreads();  // tile i visible to all; every warp is done with tile i-1's stage and partials
      if (issuer && !(SKIP & 4)) {
        if (i + STAGES - 1 < ntiles) issue(i + STAGES - 1);
        load_slots(i + STAGES);
      }
    }
    if (CPA) cp_async_commit();
    const u8* tile = ring + (i % STAGES) * BLOCK_N * ROW;

    // partial S over this warp's dims
    float sacc[NB][4], sacc2[NB][4];  // sacc2: the odd k-steps (SACC 2; unused, and compiled away, otherwise)
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      sacc[j][0] = sacc[j][1] = sacc[j][2] = sacc[j][3] = 0.f;
      sacc2[j][0] = sacc2[j][1] = sacc2[j][2] = sacc2[j][3] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < SDIMS / 16; ++kk) {
      u32 qa[4] = {qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]};
      if (QS) {
        const uint4 v = sq[(warp * (SDIMS / 16) + kk) * 32 + lane];
        qa[0] = v.x; qa[1] = v.y; qa[2] = v.z; qa[3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        if (SKIP & 1) continue;
        const u32 w = *(const u32*)(tile + (8 * j + g) * ROW + warp * SDIMS + kk * 16 + 4 * t);
        mma16816(SACC == 2 && (kk & 1) ? sacc2[j] : sacc[j], qa, f8x2_to_f16x2(w), f8x2_hi_to_f16x2(w));
      }
    }
    if (SACC == 2) {
#pragma unroll
      for (int j = 0; j < NB; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[j][e] += sacc2[j][e];
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
      // buffer i & 1: its last readers (tile i - 2) have all passed tile i - 1's barrier before any warp
      // gets here, so one barrier per tile suffices
      float4* buf = sxf + (i & 1) * NWARPS * NB * 32;
#pragma unroll
      for (int j = 0; j < NB; ++j) buf[(warp * NB + j) * 32 + lane] = make_float4(sacc[j][0], sacc[j][1], sacc[j][2], sacc[j][3]);
      if (PIPE == 1) {
        __syncthreads();  // tile i's partials visible; every warp is done with tile i-1 (its stage is free)
        if (issuer && !(SKIP & 4)) {
          if (i + STAGES - 1 < ntiles) issue(i + STAGES - 1);
          load_slots(i + STAGES);
        }
      } else {
        named_bar_sync(1 + grp, NWARPS * 32);
      }
      if (XCH) {  // this warp's rows, summed over the four partials (its own read back: no register indexing)
#pragma unroll
        for (int q = 0; q < QJ; ++q) {
          const int j = warp * QJ + q;
          float4 acc = buf[j * 32 + lane];
#pragma unroll
          for (int w2 = 1; w2 < NWARPS; ++w2) {
            const float4 a = buf[(w2 * NB + j) * 32 + lane];
            acc.x += a.x; acc.y += a.y; acc.z += a.z; acc.w += a.w;
          }
          if (XCH == 1) xred[j * 32 + lane] = acc;
          sacc[q][0] = acc.x; sacc[q][1] = acc.y; sacc[q][2] = acc.z; sacc[q][3] = acc.w;  // XCH 2: rows in [0, QJ)
        }
        if (XCH == 1) {
          __syncthreads();  // every warp's rows summed (this buffer's last readers passed this tile's first barrier)
#pragma unroll
          for (int j = 0; j < NB; ++j) {
            const float4 a = xred[j * 32 + lane];
            sacc[j][0] = a.x; sacc[j][1] = a.y; sacc[j][2] = a.z; sacc[j][3] = a.w;
          }
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
    // blocks r0 .. r0 + NR - 1, held in sacc[0, NR): all NB, or (XCH 2) this warp's QJ (rows 8 (w QJ + q) + 2t + e)
    constexpr int NR = XCH == 2 ? QJ : NB;
    const int r0 = XCH == 2 ? warp * QJ : 0;
    const i64 base_tok = lo + (i64)i * BLOCK_N;
    float mx0 = NEG_INF, mx1 = NEG_INF;
    // only the split's last tile can be cut (tiles start at lo + i * BLOCK_N, and per is a multiple of BLOCK_N),
    // so the masking (64-bit compares) runs there alone
    const bool cut = base_tok + BLOCK_N > hi;
#pragma unroll
    for (int j = 0; j < NR; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (cut && base_tok + 8 * (r0 + j) + 2 * t + e >= hi) { sacc[j][e] = NEG_INF; sacc[j][2 + e] = NEG_INF; }
        mx0 = fmaxf(mx0, sacc[j][e]);
        mx1 = fmaxf(mx1, sacc[j][2 + e]);
      }
    }
    // over the row's four lanes. As loops: their two counters keep cicc's order of the tile loop's m0..l1 phis,
    // hence the SASS, as it was with the softmax written twice (NOTES.md "The online softmax written once")
#pragma unroll
    for (int d = 1; d < 4; d *= 2) mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, d));
#pragma unroll
    for (int d = 1; d < 4; d *= 2) mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, d));
    if (XCH == 2) {  // the maxima per head across the four warps
      if (t == 0) { xmax[warp * 16 + g] = mx0; xmax[warp * 16 + g + 8] = mx1; }
      __syncthreads();  // the four warps' maxima (last read before the previous tile's third barrier)
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
      const u8* r0 = tile + (16 * kp + 2 * t) * ROW + warp * VDIMS + 16 * g;
      const uint4 w0 = *(const uint4*)(r0);
      const uint4 w1 = *(const uint4*)(r0 + ROW);
      const uint4 w2 = *(const uint4*)(r0 + 8 * ROW);
      const uint4 w3 = *(const uint4*)(r0 + 9 * ROW);
      const u32 x0[4] = {w0.x, w0.y, w0.z, w0.w}, x1[4] = {w1.x, w1.y, w1.z, w1.w};
      const u32 x2[4] = {w2.x, w2.y, w2.z, w2.w}, x3[4] = {w3.x, w3.y, w3.z, w3.w};
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        if (SKIP & 2) continue;
        // byte i of word a of a row is output dim 128 w + 16 g + 4 a + i, i.e. n-block 4 a + i, column g
        if (VALU == 0) {
          const u32 lo01 = prmt(x0[a], x1[a], 0x5140), hi01 = prmt(x0[a], x1[a], 0x7362);
          const u32 lo23 = prmt(x2[a], x3[a], 0x5140), hi23 = prmt(x2[a], x3[a], 0x7362);
          mma16816(o[4 * a + 0], pa, f8x2_to_f16x2(lo01), f8x2_to_f16x2(lo23));
          mma16816(o[4 * a + 1], pa, f8x2_hi_to_f16x2(lo01), f8x2_hi_to_f16x2(lo23));
          mma16816(o[4 * a + 2], pa, f8x2_to_f16x2(hi01), f8x2_to_f16x2(hi23));
          mma16816(o[4 * a + 3], pa, f8x2_hi_to_f16x2(hi01), f8x2_hi_to_f16x2(hi23));
        } else {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if (VALU == 2 && i >= 2) continue;
            const u32 sel = 0x4400u + 0x1111u * i;  // byte i of each row into the high byte of a half
            mma16816(o[4 * a + i], pa, f8hi_to_f16x2_alu(prmt(x0[a], x1[a], sel)),
                     f8hi_to_f16x2_alu(prmt(x2[a], x3[a], sel)));
          }
          if (VALU == 2) {
            const u32 hi01 = prmt(x0[a], x1[a], 0x7362), hi23 = prmt(x2[a], x3[a], 0x7362);
            mma16816(o[4 * a + 2], pa, f8x2_to_f16x2(hi01), f8x2_to_f16x2(hi23));
            mma16816(o[4 * a + 3], pa, f8x2_hi_to_f16x2(hi01), f8x2_hi_to_f16x2(hi23));
          }
        }
      }
    }
    if (PIPE >= 2) {  // this warp is done with the stage: the producer may refill it
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[i % STAGES]);
    }
  }
  cp_async_wait<0>();
  if (PIPE == 4 && s >= n_splits) return;  // the second group of an odd split count's last CTA: no work item

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
        for (int j = 0; j < 8; ++j)
          pk[j] = pack_bf16(o[2 * j][2 * half + e] * inv * vscale<VALU>(2 * j),
                            o[2 * j + 1][2 * half + e] * inv * vscale<VALU>(2 * j + 1));
        uint4* dst = (uint4*)(out + b * o_sb + h * o_sh + d);
        dst[0] = make_uint4(pk[0], pk[1], pk[2], pk[3]);
        dst[1] = make_uint4(pk[4], pk[5], pk[6], pk[7]);
      } else if (!empty) {
        float4* dst = (float4*)(part + ((i64)(b * heads + h) * n_splits + s) * DV + d);
#pragma unroll
        for (int j = 0; j < 4; ++j)
          dst[j] = make_float4(o[4 * j][2 * half + e] * inv * vscale<VALU>(4 * j),
                               o[4 * j + 1][2 * half + e] * inv * vscale<VALU>(4 * j + 1),
                               o[4 * j + 2][2 * half + e] * inv * vscale<VALU>(4 * j + 2),
                               o[4 * j + 3][2 * half + e] * inv * vscale<VALU>(4 * j + 3));
      }
    }
    if (!direct && warp == 0 && t == 0)
      lse[(i64)(b * heads + h) * n_splits + s] = empty ? NEG_INF : m + __log2f(l);
  }
}

#define DEFINE_KERNEL_X(NAME, BN, ST, MINB, VALU, SKIP, LOADER, QS, LAZY, PIPE, SACC, XCH)                           \
  extern "C" __global__ void __launch_bounds__(PIPE == 4 ? 384 : PIPE == 3 ? 256 : PIPE == 2 ? 160 : 128, MINB)     \
      NAME(const u16* q, const u8* pool, const int* indptr, const int* ids, const int* lens, float* part,   \
           float* lse, u16* out, float qk_scale, float out_scale, int heads, i64 pool_stride, i64 q_sb,     \
           i64 q_sh, i64 o_sb, i64 o_sh, int n_splits, int page, int direct) {                              \
    split_body<BN, ST, VALU, SKIP, LOADER, QS, LAZY, PIPE, SACC, XCH>(q, pool, indptr, ids, lens, part, lse, out,   \
                                                                qk_scale, out_scale, heads, pool_stride, q_sb, \
                                                                q_sh, o_sb, o_sh, n_splits, page, direct);     \
  }
#define DEFINE_KERNEL_S(NAME, BN, ST, MINB, VALU, SKIP, LOADER, QS, LAZY, PIPE, SACC)                                \
  extern "C" __global__ void __launch_bounds__(PIPE == 4 ? 384 : PIPE == 3 ? 256 : PIPE == 2 ? 160 : 128, MINB)     \
      NAME(const u16* q, const u8* pool, const int* indptr, const int* ids, const int* lens, float* part,   \
           float* lse, u16* out, float qk_scale, float out_scale, int heads, i64 pool_stride, i64 q_sb,     \
           i64 q_sh, i64 o_sb, i64 o_sh, int n_splits, int page, int direct) {                              \
    split_body<BN, ST, VALU, SKIP, LOADER, QS, LAZY, PIPE, SACC>(q, pool, indptr, ids, lens, part, lse, out, qk_scale, \
                                                           out_scale, heads, pool_stride, q_sb, q_sh, o_sb, o_sh, \
                                                           n_splits, page, direct);                          \
  }
#define DEFINE_KERNEL(NAME, BN, ST, MINB, VALU, SKIP, LOADER, QS, LAZY, PIPE) \
  DEFINE_KERNEL_S(NAME, BN, ST, MINB, VALU, SKIP, LOADER, QS, LAZY, PIPE, 1)

// name: rows per tile (n), ring depth (s), CTAs per SM the registers are held to (b); _tma: rows by the
// bulk-copy engine; _mix: half the P V conversion on the integer pipe (_alu: all of it); _qs: q in shared
// memory; _lz: lazy rescale; _load: timing only, both products left out (wrong results), to place time (METHOD.md);
// _1b: one CTA barrier per tile (PIPE 1); _ws: warp specialised, a producer warp and 160 threads (PIPE 2)
// _x1 / _x2: the partial S tiles combined by reduce-scatter + all-gather / each warp's softmax on its own rows (XCH)
// The kernels _picks.DEFAULT launches (sm90, sm120): the only ones a host's build-kernel compiles.
DEFINE_KERNEL_X(fp8_mla_n64_s2_b2_1b_lz_x2, 64, 2, 2, 0, 0, 2, 0, 1, 1, 1, 2)
DEFINE_KERNEL(fp8_mla_n32_s2_b2_tma4, 32, 2, 2, 0, 0, 2, 0, 0, 0)

// Experiment variants, kept because recorded figures (BENCH.md, NOTES.md) name them: compiled only where
// FP8_MLA_VARIANTS is defined (SGLOPS_FP8_MLA_VARIANTS=1: the variants harness, ncu, cu_report.py).
#ifdef FP8_MLA_VARIANTS
DEFINE_KERNEL(fp8_mla_n64_s2_b2_1b_lz, 64, 2, 2, 0, 0, 2, 0, 1, 1)  // the sm90 pick of v0.4 (round 7)
DEFINE_KERNEL(fp8_mla_n64_s2_b2, 64, 2, 2, 0, 0, 0, 0, 0, 0)
DEFINE_KERNEL(fp8_mla_n64_s2_b2_tma, 64, 2, 2, 0, 0, 1, 0, 0, 0)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_tma, 32, 3, 3, 0, 0, 1, 0, 0, 0)
DEFINE_KERNEL(fp8_mla_n32_s2_b3_tma, 32, 2, 3, 0, 0, 1, 0, 0, 0)
DEFINE_KERNEL(fp8_mla_n32_s2_b2_tma, 32, 2, 2, 0, 0, 1, 0, 0, 0)
DEFINE_KERNEL(fp8_mla_n32_s2_b3_tma_qs_lz, 32, 2, 3, 0, 0, 1, 1, 1, 0)
DEFINE_KERNEL(fp8_mla_n16_s3_b4_tma_qs_lz, 16, 3, 4, 0, 0, 1, 1, 1, 0)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_tma4, 32, 3, 3, 0, 0, 2, 0, 0, 0)
DEFINE_KERNEL(fp8_mla_n16_s3_b4_tma4_qs_lz, 16, 3, 4, 0, 0, 2, 1, 1, 0)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_tma_load, 32, 3, 3, 0, 3, 1, 0, 0, 0)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_tma_compute, 32, 3, 3, 0, 4, 1, 0, 0, 0)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_tma_noPV, 32, 3, 3, 0, 2, 1, 0, 0, 0)
// round 6 (issue 23, "Next"): one exchange per tile instead of two barriers, and the producer warp
DEFINE_KERNEL(fp8_mla_n32_s3_b3_1b, 32, 3, 3, 0, 0, 2, 0, 0, 1)
DEFINE_KERNEL(fp8_mla_n32_s4_b2_1b, 32, 4, 2, 0, 0, 2, 0, 0, 1)
DEFINE_KERNEL(fp8_mla_n32_s4_b2_ws, 32, 4, 2, 0, 0, 1, 0, 0, 2)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_1b_mix, 32, 3, 3, 2, 0, 2, 0, 0, 1)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_1b_alu, 32, 3, 3, 1, 0, 2, 0, 0, 1)
DEFINE_KERNEL(fp8_mla_n32_s4_b2_ws_alu, 32, 4, 2, 1, 0, 1, 0, 0, 2)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_1b_compute, 32, 3, 3, 0, 4, 2, 0, 0, 1)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_1b_alu_compute, 32, 3, 3, 1, 4, 2, 0, 0, 1)
DEFINE_KERNEL(fp8_mla_n32_s4_b2_ws_load, 32, 4, 2, 0, 3, 1, 0, 0, 2)
DEFINE_KERNEL(fp8_mla_n32_s4_b2_ws_compute, 32, 4, 2, 0, 4, 1, 0, 0, 2)
// round 7 (loader study): the pick's loads alone, and the 16-byte cp.async loader at the pick's shape (3 CTAs/SM)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_tma4_load, 32, 3, 3, 0, 3, 2, 0, 0, 0)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_cpa, 32, 3, 3, 0, 0, 0, 0, 0, 0)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_cpa_load, 32, 3, 3, 0, 3, 0, 0, 0, 0)
// round 7, after the slot fix: the lazy O rescale again (its 64 FMUL per warp and tile were half of the kernel's
// FMUL; +1% when the index wait hid everything, round 5), on the two 16-head candidates and the 128-head one
DEFINE_KERNEL(fp8_mla_n32_s3_b3_tma4_lz, 32, 3, 3, 0, 0, 2, 0, 1, 0)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_1b_lz, 32, 3, 3, 0, 0, 2, 0, 1, 1)
DEFINE_KERNEL(fp8_mla_n32_s4_b2_1b_lz, 32, 4, 2, 0, 0, 2, 0, 1, 1)
// round 7: the cp.async loader in byte order (LOADER 3), with and without the lazy rescale
DEFINE_KERNEL(fp8_mla_n32_s3_b3_cpf, 32, 3, 3, 0, 0, 3, 0, 0, 0)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_cpf_lz, 32, 3, 3, 0, 0, 3, 0, 1, 0)
DEFINE_KERNEL(fp8_mla_n32_s3_b3_cpf_load, 32, 3, 3, 0, 3, 3, 0, 0, 0)
// round 7: two accumulator sets for S (SACC 2)
DEFINE_KERNEL_S(fp8_mla_n32_s3_b3_tma4_lz_s2, 32, 3, 3, 0, 0, 2, 0, 1, 0, 2)
DEFINE_KERNEL_S(fp8_mla_n32_s3_b3_1b_lz_s2, 32, 3, 3, 0, 0, 2, 0, 1, 1, 2)
// round 7: 64-row tiles at 2 CTAs/SM (half the per-row exchange / softmax / rescale work, 8 S chains per warp)
DEFINE_KERNEL(fp8_mla_n64_s2_b2_tma4_lz, 64, 2, 2, 0, 0, 2, 0, 1, 0)
DEFINE_KERNEL(fp8_mla_n64_s2_b2_1b, 64, 2, 2, 0, 0, 2, 0, 0, 1)
DEFINE_KERNEL(fp8_mla_n64_s2_b2_tma4, 64, 2, 2, 0, 0, 2, 0, 0, 0)
// round 8: the producer warpgroup (PIPE 3, 256 threads, setmaxnreg; sm_90a alone: sm_120 has no setmaxnreg)
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
DEFINE_KERNEL(fp8_mla_n64_s2_b2_wg_lz, 64, 2, 2, 0, 0, 2, 0, 1, 3)
DEFINE_KERNEL(fp8_mla_n64_s2_b2_wg, 64, 2, 2, 0, 0, 2, 0, 0, 3)
DEFINE_KERNEL_S(fp8_mla_n64_s2_b2_wg_lz_s2, 64, 2, 2, 0, 0, 2, 0, 1, 3, 2)
// round 8b: PIPE 3's producer warpgroup at one CTA per SM (PIPE 4: two consumer warpgroups, 384 threads)
DEFINE_KERNEL(fp8_mla_n64_s2_b1_wg2, 64, 2, 1, 0, 0, 2, 0, 0, 4)
DEFINE_KERNEL(fp8_mla_n64_s2_b1_wg2_lz, 64, 2, 1, 0, 0, 2, 0, 1, 4)
DEFINE_KERNEL_S(fp8_mla_n64_s2_b1_wg2_lz_s2, 64, 2, 1, 0, 0, 2, 0, 1, 4, 2)
#endif
// round 9: round 7's pick with the partial-S exchange as reduce-scatter + all-gather (_x2, the softmax on each
// warp's own rows, is the pick since: above)
DEFINE_KERNEL_X(fp8_mla_n64_s2_b2_1b_lz_x1, 64, 2, 2, 0, 0, 2, 0, 1, 1, 1, 1)
#endif  // FP8_MLA_VARIANTS
