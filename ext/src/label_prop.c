#include "label_prop.h"
#include <stdlib.h>
#include <string.h>

static inline uint64_t mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

int64_t hg_lp_cluster(int64_t n, const int64_t *xadj, const int64_t *adjncy, int64_t lo,
                      const int64_t *w, int64_t bound, int rounds, uint64_t seed,
                      int64_t *label) {
    if (n <= 0) return 0;
    int64_t *size = malloc((size_t)n * sizeof(int64_t));
    int64_t *rating = calloc((size_t)n, sizeof(int64_t));
    int64_t *touched = malloc((size_t)n * sizeof(int64_t));
    int64_t *order = malloc((size_t)n * sizeof(int64_t));
    if (!size || !rating || !touched || !order) {
        free(size); free(rating); free(touched); free(order);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) { label[i] = i; size[i] = w[i]; order[i] = i; }
    uint64_t state = seed * 0x2545F4914F6CDD1DULL + 1;
    for (int r = 0; r < rounds; r++) {
        for (int64_t i = n - 1; i > 0; i--) {  /* Fisher-Yates */
            state = mix(state);
            int64_t j = (int64_t)(state % (uint64_t)(i + 1));
            int64_t t = order[i]; order[i] = order[j]; order[j] = t;
        }
        int64_t moved = 0;
        for (int64_t oi = 0; oi < n; oi++) {
            int64_t v = order[oi];
            int64_t nt = 0;
            for (int64_t e = xadj[v]; e < xadj[v + 1]; e++) {
                int64_t u = adjncy[e] - lo;
                if (u < 0 || u >= n) continue;
                int64_t c = label[u];
                if (rating[c] == 0) touched[nt++] = c;
                rating[c]++;
            }
            int64_t cur = label[v], best = cur, bestr = rating[cur];
            uint64_t besth = 0;
            for (int64_t t = 0; t < nt; t++) {
                int64_t c = touched[t], rc = rating[c];
                rating[c] = 0;
                if (c == cur || size[c] + w[v] > bound) continue;
                if (rc > bestr) { best = c; bestr = rc; besth = mix((uint64_t)c ^ state); }
                else if (rc == bestr && best != cur) {
                    uint64_t h = mix((uint64_t)c ^ state);
                    if (h > besth) { best = c; besth = h; }
                }
            }
            rating[cur] = 0;
            if (best != cur) {
                size[cur] -= w[v]; size[best] += w[v]; label[v] = best; moved++;
            }
        }
        if (moved * 1000 < n) break;
    }
    /* compact: cluster ids in order of first appearance */
    int64_t *map = rating;  /* all zero again: reuse as id map (+1) */
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = label[i];
        if (map[c] == 0) map[c] = ++k;
        label[i] = map[c] - 1;
    }
    free(size); free(rating); free(touched); free(order);
    return k;
}

int64_t hg_contract(int64_t k, const int64_t *cstart, const int64_t *members,
                    const int64_t *xadj, const int64_t *adjncy, const int64_t *glab,
                    int64_t K, int64_t cl_lo, int64_t *cxadj, int64_t *cadj, int64_t *cwgt) {
    int64_t *touched = malloc((size_t)(K > 0 ? K : 1) * sizeof(int64_t));
    int64_t *cnt = calloc((size_t)(K > 0 ? K : 1), sizeof(int64_t));
    if (!touched || !cnt) { free(touched); free(cnt); return -1; }
    int64_t m = 0;
    cxadj[0] = 0;
    for (int64_t c = 0; c < k; c++) {
        int64_t self = cl_lo + c, nt = 0;
        for (int64_t i = cstart[c]; i < cstart[c + 1]; i++) {
            int64_t v = members[i];
            for (int64_t e = xadj[v]; e < xadj[v + 1]; e++) {
                int64_t d = glab[adjncy[e]];
                if (d == self) continue;
                if (cnt[d] == 0) touched[nt++] = d;
                cnt[d]++;
            }
        }
        for (int64_t t = 0; t < nt; t++) {
            int64_t d = touched[t];
            if (cadj) { cadj[m + t] = d; cwgt[m + t] = cnt[d]; }
            cnt[d] = 0;
        }
        m += nt;
        cxadj[c + 1] = m;
    }
    free(touched); free(cnt);
    return m;
}

int64_t hg_lp_refine(int64_t n, const int64_t *xadj, const int64_t *adjncy, int64_t lo,
                     const int64_t *gpart, int64_t *part, const int64_t *w, int64_t nparts,
                     int64_t *pw, const int64_t *cap, uint64_t seed) {
    if (n <= 0) return 0;
    int64_t *conn = calloc((size_t)nparts, sizeof(int64_t));
    int64_t *touched = malloc((size_t)nparts * sizeof(int64_t));
    int64_t *order = malloc((size_t)n * sizeof(int64_t));
    if (!conn || !touched || !order) { free(conn); free(touched); free(order); return -1; }
    uint64_t state = seed * 0x2545F4914F6CDD1DULL + 7;
    for (int64_t i = 0; i < n; i++) order[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        state = mix(state);
        int64_t j = (int64_t)(state % (uint64_t)(i + 1));
        int64_t t = order[i]; order[i] = order[j]; order[j] = t;
    }
    int64_t moved = 0;
    for (int64_t oi = 0; oi < n; oi++) {
        int64_t v = order[oi], nt = 0;
        for (int64_t e = xadj[v]; e < xadj[v + 1]; e++) {
            int64_t g = adjncy[e], u = g - lo;
            int64_t q = (u >= 0 && u < n) ? part[u] : gpart[g];
            if (conn[q] == 0) touched[nt++] = q;
            conn[q]++;
        }
        int64_t cur = part[v], best = cur, bestc = conn[cur];
        for (int64_t t = 0; t < nt; t++) {
            int64_t q = touched[t], c = conn[q];
            conn[q] = 0;
            if (q == cur || pw[q] + w[v] > cap[q]) continue;
            if (c > bestc) { best = q; bestc = c; }
        }
        conn[cur] = 0;
        if (best != cur) {
            pw[cur] -= w[v]; pw[best] += w[v]; part[v] = best; moved++;
        }
    }
    free(conn); free(touched); free(order);
    return moved;
}
