#ifndef HPCGNN_AVX512_H
#define HPCGNN_AVX512_H
/* What the hand-vectorised kernels (weight_grad.c, aggregate.c) share: the target
 * attribute their AVX-512 variants are built with, the run-time check that picks
 * them, and the lanes of the last of the 16-float registers covering a row. */
#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HPCGNN_X86 1
#define AVX512 __attribute__((target("avx512f,bmi")))

static inline int hpcgnn_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? 1 : 0;
}

/* n > 0 floats in (n + 15) / 16 registers: the last one's lanes. */
static inline __mmask16 hpcgnn_tail_lanes(int64_t n)
{
    int last = (int)(n - 16 * ((n + 15) / 16 - 1));
    return (__mmask16)(last == 16 ? 0xffff : (1u << last) - 1);
}
#endif

#endif
