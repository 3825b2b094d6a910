#include "sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- random numbers: xoshiro256** seeded by splitmix64 ------------------------ */
typedef struct { uint64_t s[4]; } rng_t;

static inline uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static inline void rng_seed(rng_t *r, uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ULL);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}
static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static inline uint64_t rng_next(rng_t *r) {
    uint64_t *s = r->s;
    uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return res;
}
/* uniform in [0, n): Lemire's multiply-shift (bias <= n / 2^64) */
static inline uint64_t rng_below(rng_t *r, uint64_t n) {
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}
/* uniform in (0, 1] */
static inline double rng_unit(rng_t *r) { return ((rng_next(r) >> 11) + 1) * 0x1.0p-53; }

/* ---- counts ------------------------------------------------------------------ */
int64_t hpcgnn_sample_counts(const int64_t *first, const int64_t *end, int64_t n, int64_t fanout,
                             int replace, int64_t *counts) {
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t d = end[i] - first[i], c;
        if (d < 0) return -1;
        if (fanout < 0) c = d;
        else if (replace) c = d > 0 ? fanout : 0;
        else c = d < fanout ? d : fanout;
        counts[i] = c;
        if (__builtin_add_overflow(total, c, &total)) return -2;
    }
    return total;
}

/* ---- uniform ----------------------------------------------------------------- */
static void sample_one_uniform(rng_t *r, int64_t f, int64_t d, int64_t k, int replace, int64_t *o) {
    if (replace) {
        for (int64_t j = 0; j < k; j++) o[j] = f + (int64_t)rng_below(r, (uint64_t)d);
        return;
    }
    if (k >= d) {                         /* take all */
        for (int64_t j = 0; j < d; j++) o[j] = f + j;
        return;
    }
    if (k <= 64) {                        /* Floyd: k draws, membership by a short scan */
        int64_t m = 0;
        for (int64_t j = d - k; j < d; j++) {
            int64_t t = (int64_t)rng_below(r, (uint64_t)j + 1), hit = 0;
            for (int64_t q = 0; q < m; q++)
                if (o[q] == t) { hit = 1; break; }
            o[m++] = hit ? j : t;
        }
        for (int64_t q = 0; q < k; q++) o[q] += f;
        return;
    }
    /* selection sampling (Knuth's algorithm S): one pass, O(d), no memory */
    int64_t need = k, m = 0;
    for (int64_t j = 0; j < d && need > 0; j++) {
        if ((int64_t)rng_below(r, (uint64_t)(d - j)) < need) { o[m++] = f + j; need--; }
    }
}

void hpcgnn_sample_uniform(const int64_t *first, const int64_t *end, int64_t n, int64_t fanout,
                           int replace, uint64_t seed, const int64_t *offs, int64_t *out, int nthreads) {
    (void)nthreads;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1 && n > 4096)
#endif
    for (int64_t i = 0; i < n; i++) {
        int64_t d = end[i] - first[i];
        if (d <= 0) continue;
        int64_t c = fanout < 0 ? d : (replace ? fanout : (d < fanout ? d : fanout));
        if (fanout < 0) { for (int64_t j = 0; j < d; j++) out[offs[i] + j] = first[i] + j; continue; }
        rng_t r;
        rng_seed(&r, seed, (uint64_t)i);
        sample_one_uniform(&r, first[i], d, c, replace, out + offs[i]);
    }
}

/* ---- weighted ---------------------------------------------------------------- */
int64_t hpcgnn_sample_weighted_counts(const int64_t *first, const int64_t *end, int64_t n,
                                      int64_t fanout, int replace, const double *w,
                                      const int64_t *woffs, int64_t *counts) {
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t d = end[i] - first[i], nz = 0, c;
        if (d < 0) return -1;
        const double *wi = w + woffs[i];
        for (int64_t j = 0; j < d; j++) nz += wi[j] > 0;
        if (fanout < 0) c = nz;
        else if (replace) c = nz > 0 ? fanout : 0;
        else c = nz < fanout ? nz : fanout;
        counts[i] = c;
        if (__builtin_add_overflow(total, c, &total)) return -2;
    }
    return total;
}

/* min-heap on keys (size k) holding the k largest keys seen */
static inline void heap_down(double *hk, int64_t *hv, int64_t k, int64_t p) {
    for (;;) {
        int64_t l = 2 * p + 1, s = p;
        if (l < k && hk[l] < hk[s]) s = l;
        if (l + 1 < k && hk[l + 1] < hk[s]) s = l + 1;
        if (s == p) return;
        double tk = hk[p]; hk[p] = hk[s]; hk[s] = tk;
        int64_t tv = hv[p]; hv[p] = hv[s]; hv[s] = tv;
        p = s;
    }
}

int hpcgnn_sample_weighted(const int64_t *first, const int64_t *end, int64_t n, int64_t fanout,
                           int replace, const double *w, const int64_t *woffs, uint64_t seed,
                           const int64_t *offs, int64_t *out, int nthreads) {
    int64_t maxd = 0;
    for (int64_t i = 0; i < n; i++) if (end[i] - first[i] > maxd) maxd = end[i] - first[i];
    int err = 0;
    (void)nthreads;
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads) if (nthreads > 1 && n > 4096)
#endif
    {
        /* scratch: keys (heap) or the CDF, per thread */
        double *hk = malloc(sizeof(double) * (size_t)(maxd + 1));
        int64_t *hv = malloc(sizeof(int64_t) * (size_t)(maxd + 1));
        if (!hk || !hv) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
            err = 1;
        }
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t i = 0; i < n; i++) {
            if (!hk || !hv) continue;
            int64_t d = end[i] - first[i], c;
            const double *wi = w + woffs[i];
            int64_t *o = out + offs[i];
            int64_t nz = 0;
            double wmax = 0;
            for (int64_t j = 0; j < d; j++) { nz += wi[j] > 0; if (wi[j] > wmax) wmax = wi[j]; }
            if (nz == 0) continue;
            c = fanout < 0 ? nz : (replace ? fanout : (nz < fanout ? nz : fanout));
            if (fanout < 0 || (!replace && c == nz)) {      /* every positive-weight candidate */
                int64_t m = 0;
                for (int64_t j = 0; j < d; j++) if (wi[j] > 0) o[m++] = first[i] + j;
                continue;
            }
            rng_t r;
            rng_seed(&r, seed, (uint64_t)i);
            /* weights scaled by a power of two (exact) that brings the seed's largest into
               [0.5, 1): sums of huge weights stay finite and subnormal ones are not lost in
               log(u) / w; two factors, since 2^-e alone may not be a double */
            int e;
            frexp(wmax, &e);
            const double s1 = ldexp(1.0, -(e / 2)), s2 = ldexp(1.0, -(e - e / 2));
            if (replace) {                                    /* inverse CDF, binary search */
                double acc = 0;
                for (int64_t j = 0; j < d; j++) { acc += wi[j] > 0 ? wi[j] * s1 * s2 : 0; hk[j] = acc; }
                for (int64_t q = 0; q < c; q++) {
                    double u = (1.0 - rng_unit(&r)) * acc;    /* [0, acc) */
                    int64_t lo = 0, hi = d - 1;
                    while (lo < hi) { int64_t mid = (lo + hi) / 2; if (hk[mid] > u) hi = mid; else lo = mid + 1; }
                    while (lo < d - 1 && wi[lo] <= 0) lo++;   /* guard against ties at zero weight */
                    o[q] = first[i] + lo;
                }
                continue;
            }
            /* A-Res: key = log(u) / w, keep the c largest */
            int64_t h = 0;
            for (int64_t j = 0; j < d; j++) {
                if (!(wi[j] > 0)) continue;
                double wr = wi[j] * s1 * s2;                  /* 0 when it underflows */
                double key = wr > 0 ? log(rng_unit(&r)) / wr : -HUGE_VAL;
                if (h < c) {
                    int64_t p = h++;
                    hk[p] = key; hv[p] = j;
                    while (p > 0) {                           /* sift up */
                        int64_t par = (p - 1) / 2;
                        if (hk[par] <= hk[p]) break;
                        double tk = hk[p]; hk[p] = hk[par]; hk[par] = tk;
                        int64_t tv = hv[p]; hv[p] = hv[par]; hv[par] = tv;
                        p = par;
                    }
                } else if (key > hk[0]) {
                    hk[0] = key; hv[0] = j;
                    heap_down(hk, hv, c, 0);
                }
            }
            for (int64_t q = 0; q < c; q++) o[q] = first[i] + hv[q];
        }
        free(hk);
        free(hv);
    }
    return err ? -1 : 0;
}

/* ---- relabel ----------------------------------------------------------------- */
static inline uint64_t hash64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
    return x;
}

static int table_alloc(hpcgnn_relabel_t *r, int64_t cap) {
    r->slots = malloc(sizeof(int64_t) * 2 * (size_t)cap);
    if (!r->slots) return -1;
    memset(r->slots, 0xff, sizeof(int64_t) * 2 * (size_t)cap);    /* -1 */
    r->cap = cap;
    return 0;
}

int hpcgnn_relabel_init(hpcgnn_relabel_t *r, int64_t expected) {
    int64_t cap = 16;
    while (cap < 2 * expected) cap <<= 1;
    r->n = 0;
    r->nodes_cap = expected > 16 ? expected : 16;
    r->nodes = malloc(sizeof(int64_t) * (size_t)r->nodes_cap);
    if (!r->nodes) return -1;
    if (table_alloc(r, cap)) { free(r->nodes); r->nodes = NULL; return -1; }
    return 0;
}

void hpcgnn_relabel_free(hpcgnn_relabel_t *r) {
    free(r->slots); free(r->nodes);
    r->slots = r->nodes = NULL;
    r->cap = r->n = r->nodes_cap = 0;
}

int hpcgnn_relabel_reset(hpcgnn_relabel_t *r, int64_t expected) {
    int64_t cap = r->cap;
    while (cap < 2 * expected) cap <<= 1;
    r->n = 0;
    if (cap != r->cap) {
        free(r->slots);
        r->slots = NULL;
        if (table_alloc(r, cap)) { r->cap = 0; return -1; }
    } else {
        memset(r->slots, 0xff, sizeof(int64_t) * 2 * (size_t)cap);
    }
    return 0;
}

static int grow(hpcgnn_relabel_t *r) {
    int64_t *old = r->slots, oc = r->cap;
    if (table_alloc(r, oc * 2)) { r->slots = old; r->cap = oc; return -1; }
    uint64_t mask = (uint64_t)r->cap - 1;
    for (int64_t s = 0; s < oc; s++) {
        if (old[2 * s] < 0) continue;
        uint64_t h = hash64((uint64_t)old[2 * s]) & mask;
        while (r->slots[2 * h] >= 0) h = (h + 1) & mask;
        r->slots[2 * h] = old[2 * s]; r->slots[2 * h + 1] = old[2 * s + 1];
    }
    free(old);
    return 0;
}

#define RELABEL_PREFETCH 16

int hpcgnn_relabel_map(hpcgnn_relabel_t *r, const int64_t *ids, int64_t n, int64_t *local) {
    /* the node list for the worst case (every id new) up front; the table grows when
     * an insertion would fill it past half (sizing it for the worst case doubled
     * the memory every probe and every reset touch) */
    if (r->n + n > r->nodes_cap) {
        int64_t nc = r->nodes_cap;
        while (nc < r->n + n) nc *= 2;
        int64_t *p = realloc(r->nodes, sizeof(int64_t) * (size_t)nc);
        if (!p) return -1;
        r->nodes = p; r->nodes_cap = nc;
    }
    uint64_t mask = (uint64_t)r->cap - 1;
    int64_t *slots = r->slots, *nodes = r->nodes, m = r->n;
    for (int64_t i = 0; i < n; i++) {
        /* random probes into a large table are cache misses: keep several in flight */
        if (i + RELABEL_PREFETCH < n)
            __builtin_prefetch(&slots[2 * (hash64((uint64_t)ids[i + RELABEL_PREFETCH]) & mask)], 1, 1);
        int64_t x = ids[i];
        uint64_t h = hash64((uint64_t)x) & mask;
        for (;;) {
            int64_t k = slots[2 * h];
            if (k == x) { local[i] = slots[2 * h + 1]; break; }
            if (k < 0) {
                if (2 * (m + 1) > r->cap) {          /* full past half: grow, then probe again */
                    r->n = m;
                    if (grow(r)) return -1;
                    slots = r->slots; mask = (uint64_t)r->cap - 1;
                    h = hash64((uint64_t)x) & mask;
                    continue;
                }
                slots[2 * h] = x; slots[2 * h + 1] = m; nodes[m] = x; local[i] = m++;
                break;
            }
            h = (h + 1) & mask;
        }
    }
    r->n = m;
    return 0;
}
