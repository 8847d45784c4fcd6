"""The C text of the QuickScorer kernels (`quickscorer.py` builds the tables around it)."""

from __future__ import annotations

from string import Template

# One kernel per vector width, each compiled for the instructions it needs and chosen
# when the library runs by what the CPU has (x86-64 only: elsewhere the if/else code).
# Lanes match the register: 8 doubles in AVX-512's, 4 in AVX2's; more lanes than the
# register holds measured 3-5x slower.
KERNELS = (("score_avx512", 8, "avx512f,avx512dq"), ("score_avx2", 4, "avx2"))

KERNEL = Template(r"""
typedef double ${name}_values __attribute__((vector_size(${lanes} * 8)));
typedef int64_t ${name}_bits __attribute__((vector_size(${lanes} * 8)));

/* The sums of the trees for rows start .. start + count - 1 (count <= ${lanes}), each
 * row's QS_OUTPUTS sums one after the other. `reachable` holds QS_TREES vectors. */
__attribute__((target("${target}")))
static void ${name}(const double* const* columns, int64_t stride, int64_t start,
                    int64_t count, void* scratch, THRESHER_LEAF* sums) {
  ${name}_bits* reachable = scratch;
  for (int32_t t = 0; t < QS_TREES; ++t) reachable[t] = ~(${name}_bits){0};
  for (int32_t f = 0; f < QS_FEATURES; ++f) {
    if (qs_first[f] == qs_first[f + 1] && qs_missing_first[f] == qs_missing_first[f + 1])
      continue; /* no tree tests this feature */
    ${name}_values x;
    double top = -INFINITY;
    int missing = 0;
    for (int32_t lane = 0; lane < ${lanes}; ++lane) {
      const double value =
          lane < count ? (double)(THRESHER_VALUE)columns[f][(start + lane) * stride] : -INFINITY;
      x[lane] = value;
      missing |= isnan(value);
      top = value > top ? value : top;
    }
    for (int32_t n = qs_first[f]; n < qs_first[f + 1] && top > qs_threshold[n]; ++n)
      reachable[qs_tree[n]] &= ~((x > qs_threshold[n]) & (int64_t)qs_gone[n]);
    if (missing) {
      const ${name}_bits nan = x != x;
      for (int32_t n = qs_missing_first[f]; n < qs_missing_first[f + 1]; ++n)
        reachable[qs_missing_tree[n]] &= ~(nan & (int64_t)qs_missing_gone[n]);
    }
  }
  for (int64_t k = 0; k < count * QS_OUTPUTS; ++k) sums[k] = 0;
  for (int32_t t = 0; t < QS_TREES; ++t) {
    const THRESHER_LEAF* leaf = qs_leaf + qs_leaf_first[t];
    for (int64_t lane = 0; lane < count; ++lane)
      sums[lane * QS_OUTPUTS + qs_output[t]] +=
          leaf[__builtin_ctzll((uint64_t)reachable[t][lane])];
  }
}
""")

# Trees of at most 32 leaves with double leaves (LightGBM's default of 31): 16 rows at a
# time, a 32-bit bit set per row, and the leaves gathered 8 at a time. 1.4x the 8-row
# kernel on the benchmark's model. In AVX-512 intrinsics: 16 doubles fill two registers,
# which the vector extensions above compile badly (more lanes than a register, 3-5x
# slower), and they have no vector count of trailing zeros.
NARROW = r"""
__attribute__((target("avx512f,avx512dq,avx512cd")))
static void score_narrow(const double* const* columns, int64_t stride, int64_t start,
                         int64_t count, void* scratch, double* sums) {
  __m512i* reachable = scratch;
  for (int32_t t = 0; t < QS_TREES; ++t) reachable[t] = _mm512_set1_epi32(-1);
  const __m512d floor = _mm512_set1_pd(-INFINITY);
  for (int32_t f = 0; f < QS_FEATURES; ++f) {
    if (qs_first[f] == qs_first[f + 1] && qs_missing_first[f] == qs_missing_first[f + 1])
      continue; /* no tree tests this feature */
    __m512d low, high; /* rows 0-7, rows 8-15 */
    if (count == 16 && stride == 1 && sizeof(THRESHER_VALUE) == sizeof(double)) {
      low = _mm512_loadu_pd(columns[f] + start);
      high = _mm512_loadu_pd(columns[f] + start + 8);
    } else {
      double lanes[16];
      for (int32_t lane = 0; lane < 16; ++lane)
        lanes[lane] =
            lane < count ? (double)(THRESHER_VALUE)columns[f][(start + lane) * stride] : -INFINITY;
      low = _mm512_loadu_pd(lanes);
      high = _mm512_loadu_pd(lanes + 8);
    }
    const __mmask8 nan_low = _mm512_cmp_pd_mask(low, low, _CMP_UNORD_Q);
    const __mmask8 nan_high = _mm512_cmp_pd_mask(high, high, _CMP_UNORD_Q);
    const __mmask16 nan = (__mmask16)(nan_low | (nan_high << 8));
    const double top = _mm512_reduce_max_pd(_mm512_max_pd(
        _mm512_mask_blend_pd(nan_low, low, floor), _mm512_mask_blend_pd(nan_high, high, floor)));
    for (int32_t n = qs_first[f]; n < qs_first[f + 1] && top > qs_threshold[n]; ++n) {
      const __m512d threshold = _mm512_set1_pd(qs_threshold[n]);
      const __mmask16 above =
          (__mmask16)(_mm512_cmp_pd_mask(low, threshold, _CMP_GT_OQ) |
                      (_mm512_cmp_pd_mask(high, threshold, _CMP_GT_OQ) << 8));
      __m512i* bits = reachable + qs_tree[n];
      *bits = _mm512_mask_andnot_epi32(*bits, above, _mm512_set1_epi32((int32_t)qs_gone[n]), *bits);
    }
    if (nan) {
      for (int32_t n = qs_missing_first[f]; n < qs_missing_first[f + 1]; ++n) {
        __m512i* bits = reachable + qs_missing_tree[n];
        const __m512i gone = _mm512_set1_epi32((int32_t)qs_missing_gone[n]);
        *bits = _mm512_mask_andnot_epi32(*bits, nan, gone, *bits);
      }
    }
  }
  __m512d* totals = (__m512d*)(reachable + QS_TREES); /* two per output: rows 0-7, 8-15 */
  for (int32_t k = 0; k < 2 * QS_OUTPUTS; ++k) totals[k] = _mm512_setzero_pd();
  const __m512i last = _mm512_set1_epi32(31);
  for (int32_t t = 0; t < QS_TREES; ++t) {
    /* the exit leaf, the lowest set bit: 31 - the leading zeros of that bit alone */
    const __m512i bits = reachable[t];
    const __m512i lowest = _mm512_and_si512(bits, _mm512_sub_epi32(_mm512_setzero_si512(), bits));
    const __m512i leaf = _mm512_sub_epi32(last, _mm512_lzcnt_epi32(lowest));
    const double* values = qs_leaf + qs_leaf_first[t];
    __m512d* total = totals + 2 * qs_output[t];
    total[0] = _mm512_add_pd(
        total[0], _mm512_i32gather_pd(_mm512_castsi512_si256(leaf), values, 8));
    total[1] = _mm512_add_pd(
        total[1], _mm512_i32gather_pd(_mm512_extracti64x4_epi64(leaf, 1), values, 8));
  }
  for (int32_t k = 0; k < QS_OUTPUTS; ++k) {
    double lanes[16];
    _mm512_storeu_pd(lanes, totals[2 * k]);
    _mm512_storeu_pd(lanes + 8, totals[2 * k + 1]);
    for (int64_t lane = 0; lane < count; ++lane) sums[lane * QS_OUTPUTS + k] = lanes[lane];
  }
}
"""

# Scores all rows and returns 1, or returns 0 when this CPU has no kernel (the caller then
# runs the if/else code). Base scores and postprocessor as tl2cgen's `predict` applies them.
SCORE = r"""
int32_t thresher_lanes(void) {
#if QS_KERNELS
  __builtin_cpu_init();
  const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  if (QS_NARROW && avx512 && __builtin_cpu_supports("avx512cd")) return 16;
  if (avx512) return 8;
  if (__builtin_cpu_supports("avx2")) return 4;
#endif
  return 0;
}

int thresher_quickscore(const double* const* columns, int64_t stride, int64_t rows,
                        double* out) {
#if QS_KERNELS
  const int32_t lanes = thresher_lanes();
  if (lanes == 0) return 0;
  /* QS_TREES bit-set vectors, and the narrow kernel's two sum vectors per output */
  void* scratch = aligned_alloc(64, 64 * (QS_TREES + 2 * QS_OUTPUTS));
  if (scratch == NULL) return 0;
  THRESHER_LEAF sums[16 * QS_OUTPUTS];
  for (int64_t start = 0; start < rows; start += lanes) {
    const int64_t count = rows - start < lanes ? rows - start : lanes;
#if QS_NARROW
    if (lanes == 16) {
      score_narrow(columns, stride, start, count, scratch, (double*)sums);
    } else
#endif
    if (lanes == 8) {
      score_avx512(columns, stride, start, count, scratch, sums);
    } else {
      score_avx2(columns, stride, start, count, scratch, sums);
    }
    for (int64_t row = 0; row < count; ++row) {
      THRESHER_LEAF* result = sums + row * QS_OUTPUTS;
      for (int32_t k = 0; k < QS_OUTPUTS; ++k) result[k] += qs_base[k];
      postprocess(result);
      for (int32_t k = 0; k < QS_OUTPUTS; ++k)
        out[(start + row) * QS_OUTPUTS + k] = (double)result[k];
    }
  }
  free(scratch);
  return 1;
#else
  (void)columns, (void)stride, (void)rows, (void)out;
  return 0;
#endif
}
"""

# What a model this form cannot hold compiles to: no kernel, the if/else code scores.
NONE = r"""
#include "header.h"

int32_t thresher_lanes(void) { return 0; }

int thresher_quickscore(const double* const* columns, int64_t stride, int64_t rows,
                        double* out) {
  (void)columns, (void)stride, (void)rows, (void)out;
  return 0;
}
"""
