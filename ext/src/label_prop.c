#include "label_prop.h"
#include <stdlib.h>
#include <string.h>

/* Every sweep visits the vertices block by block (BLK consecutive vertices, blocks in
 * a seeded random order): the adjacency of a block is one contiguous stretch, so the
 * lookups of neighbours' labels/parts can be prefetched PF edges ahead, and the
 * random order still breaks the id order's bias. */
#define BLK 256
#define PF 24

static inline uint64_t mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void shuffle(int64_t *a, int64_t n, uint64_t *state) {
    for (int64_t i = n - 1; i > 0; i--) {  /* Fisher-Yates */
        *state = mix(*state);
        int64_t j = (int64_t)(*state % (uint64_t)(i + 1));
        int64_t t = a[i]; a[i] = a[j]; a[j] = t;
    }
}

static int64_t max_degree(int64_t n, const int64_t *xadj) {
    int64_t d = 0;
    for (int64_t v = 0; v < n; v++) if (xadj[v + 1] - xadj[v] > d) d = xadj[v + 1] - xadj[v];
    return d;
}

/* Small open-addressing counter keyed by cluster id, sized per vertex to the next
 * power of two >= 2 * degree: stays in L1/L2, where an n-sized rating array missed
 * the cache on every edge. */
typedef struct { int32_t *key; int64_t *val; int32_t *used; int64_t nused; unsigned bits; } counter;

/* Table sizes stop at 2^31 slots: keys are local cluster ids (fewer than 2^31 - 1 per
 * rank), so a hub of more neighbours still finds a free slot, and 1u << bits stays defined. */
#define COUNTER_MAX_BITS 31

static int counter_init(counter *c, int64_t maxdeg) {
    unsigned bits = 4;
    while (bits < COUNTER_MAX_BITS && ((int64_t)1 << bits) < 2 * maxdeg) bits++;
    c->key = malloc(((size_t)1 << bits) * sizeof(int32_t));
    c->val = malloc(((size_t)1 << bits) * sizeof(int64_t));
    c->used = malloc(((size_t)1 << bits) * sizeof(int32_t));
    if (!c->key || !c->val || !c->used) return -1;
    memset(c->key, 0xff, ((size_t)1 << bits) * sizeof(int32_t));
    c->nused = 0; c->bits = bits;
    return 0;
}

static void counter_free(counter *c) { free(c->key); free(c->val); free(c->used); }

static inline void counter_size(counter *c, int64_t deg) {
    unsigned bits = 4;
    while (bits < COUNTER_MAX_BITS && ((int64_t)1 << bits) < 2 * deg) bits++;
    c->bits = bits;
}

static inline void counter_add(counter *c, int32_t k, int64_t by) {
    uint32_t mask = (1u << c->bits) - 1;
    uint32_t s = ((uint32_t)k * 2654435761u) >> (32 - c->bits);
    for (;; s = (s + 1) & mask) {
        if (c->key[s] == k) { c->val[s] += by; return; }
        if (c->key[s] < 0) { c->key[s] = k; c->val[s] = by; c->used[c->nused++] = (int32_t)s; return; }
    }
}

static inline int64_t counter_get(const counter *c, int32_t k) {
    uint32_t mask = (1u << c->bits) - 1;
    uint32_t s = ((uint32_t)k * 2654435761u) >> (32 - c->bits);
    for (;; s = (s + 1) & mask) {
        if (c->key[s] == k) return c->val[s];
        if (c->key[s] < 0) return 0;
    }
}

static inline void counter_clear(counter *c) {
    for (int64_t i = 0; i < c->nused; i++) c->key[c->used[i]] = -1;
    c->nused = 0;
}

int64_t hg_lp_cluster(int64_t n, const int64_t *xadj, const int64_t *adjncy, const int64_t *adjwgt,
                      int64_t lo, const int64_t *w, int64_t bound, int rounds, uint64_t seed,
                      int64_t *label) {
    if (n <= 0) return 0;
    if (n >= INT32_MAX) return -2;
    int64_t nb = (n + BLK - 1) / BLK;
    int32_t *lab = malloc((size_t)n * sizeof(int32_t));
    int64_t *size = malloc((size_t)n * sizeof(int64_t));
    int64_t *blocks = malloc((size_t)nb * sizeof(int64_t));
    counter cnt = {0};
    if (!lab || !size || !blocks || counter_init(&cnt, max_degree(n, xadj)) < 0) {
        free(lab); free(size); free(blocks); counter_free(&cnt);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) { lab[i] = (int32_t)i; size[i] = w[i]; }
    for (int64_t b = 0; b < nb; b++) blocks[b] = b;
    uint64_t state = seed * 0x2545F4914F6CDD1DULL + 1;
    for (int r = 0; r < rounds; r++) {
        shuffle(blocks, nb, &state);
        int64_t moved = 0;
        for (int64_t bi = 0; bi < nb; bi++) {
            int64_t v0 = blocks[bi] * BLK, v1 = v0 + BLK < n ? v0 + BLK : n, eend = xadj[v1];
            for (int64_t v = v0; v < v1; v++) {
                counter_size(&cnt, xadj[v + 1] - xadj[v]);
                for (int64_t e = xadj[v]; e < xadj[v + 1]; e++) {
                    if (e + PF < eend) {
                        uint64_t p = (uint64_t)(adjncy[e + PF] - lo);
                        if (p < (uint64_t)n) __builtin_prefetch(&lab[p]);
                    }
                    uint64_t u = (uint64_t)(adjncy[e] - lo);
                    if (u >= (uint64_t)n) continue;
                    counter_add(&cnt, lab[u], adjwgt ? adjwgt[e] : 1);
                }
                int32_t cur = lab[v], best = cur;
                int64_t bestr = counter_get(&cnt, cur);
                uint64_t besth = 0;
                for (int64_t t = 0; t < cnt.nused; t++) {
                    int32_t s = cnt.used[t], c = cnt.key[s];
                    int64_t rc = cnt.val[s];
                    if (c == cur || rc < bestr) continue;
                    if (rc == bestr && best == cur) continue;
                    if (size[c] + w[v] > bound) continue;
                    if (rc > bestr) { best = c; bestr = rc; besth = mix((uint64_t)c ^ state); }
                    else {
                        uint64_t h = mix((uint64_t)c ^ state);
                        if (h > besth) { best = c; besth = h; }
                    }
                }
                counter_clear(&cnt);
                if (best != cur) {
                    size[cur] -= w[v]; size[best] += w[v]; lab[v] = best; moved++;
                }
            }
        }
        if (moved * 1000 < n) break;
    }
    /* compact: cluster ids in order of first appearance */
    int64_t *map = size;
    for (int64_t i = 0; i < n; i++) map[i] = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t c = lab[i];
        if (map[c] == 0) map[c] = ++k;
        label[i] = map[c] - 1;
    }
    free(lab); free(size); free(blocks); counter_free(&cnt);
    return k;
}

int64_t hg_contract(int64_t k, const int64_t *cstart, const int64_t *members,
                    const int64_t *xadj, const int64_t *adjncy, const int64_t *adjwgt,
                    const int32_t *glab, int64_t K, int64_t cl_lo, int64_t *cxadj, int64_t *cadj,
                    int64_t *cwgt) {
    int64_t *touched = malloc((size_t)(K > 0 ? K : 1) * sizeof(int64_t));
    int64_t *cnt = calloc((size_t)(K > 0 ? K : 1), sizeof(int64_t));
    if (!touched || !cnt) { free(touched); free(cnt); return -1; }
    int64_t m = 0;
    cxadj[0] = 0;
    for (int64_t c = 0; c < k; c++) {
        int64_t self = cl_lo + c, nt = 0;
        for (int64_t i = cstart[c]; i < cstart[c + 1]; i++) {
            int64_t v = members[i];
            if (i + 2 < cstart[c + 1]) __builtin_prefetch(&adjncy[xadj[members[i + 2]]]);
            int64_t e1 = xadj[v + 1];
            for (int64_t e = xadj[v]; e < e1; e++) {
                if (e + 8 < e1) __builtin_prefetch(&glab[adjncy[e + 8]]);
                int64_t d = glab[adjncy[e]];
                if (d == self) continue;
                if (cnt[d] == 0) touched[nt++] = d;
                cnt[d] += adjwgt ? adjwgt[e] : 1;
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

/* Whether vertex v leaving part a for part b, and vertex u leaving b for a, keeps both
 * parts within cap in every weight column. */
static int swap_fits(const int64_t *w, int64_t ncon, const int64_t *pw, const int64_t *cap,
                     int64_t v, int64_t u, int64_t a, int64_t b) {
    for (int64_t j = 0; j < ncon; j++) {
        int64_t d = w[v * ncon + j] - w[u * ncon + j];
        if (pw[b * ncon + j] + d > cap[b * ncon + j] || pw[a * ncon + j] - d > cap[a * ncon + j]) return 0;
    }
    return 1;
}

static void move_to(const int64_t *w, int64_t ncon, int64_t *pw, int32_t *mine, int64_t *part,
                    int64_t v, int64_t from, int64_t to) {
    for (int64_t j = 0; j < ncon; j++) {
        pw[from * ncon + j] -= w[v * ncon + j];
        pw[to * ncon + j] += w[v * ncon + j];
    }
    mine[v] = (int32_t)to; part[v] = to;
}

int64_t hg_lp_refine(int64_t n, const int64_t *xadj, const int64_t *adjncy, const int64_t *adjwgt,
                     int64_t lo, int32_t *gpart, int64_t *part, const int64_t *w, int64_t ncon,
                     int64_t nparts, int64_t *pw, const int64_t *cap, uint64_t seed, int swap) {
    if (n <= 0) return 0;
    int64_t nb = (n + BLK - 1) / BLK;
    int64_t *conn = calloc((size_t)nparts, sizeof(int64_t));
    int64_t *touched = malloc((size_t)nparts * sizeof(int64_t));
    int64_t *blocks = malloc((size_t)nb * sizeof(int64_t));
    /* swap: a vertex whose better part is full waits in the queue of its (part, wanted
     * part) pair, a linked list through qnext, until one of the wanted part wants its part */
    int64_t *qhead = swap ? malloc((size_t)(nparts * nparts) * sizeof(int64_t)) : NULL;
    int64_t *qnext = swap ? malloc((size_t)n * sizeof(int64_t)) : NULL;
    if (!conn || !touched || !blocks || (swap && (!qhead || !qnext))) {
        free(conn); free(touched); free(blocks); free(qhead); free(qnext); return -1;
    }
    for (int64_t i = 0; swap && i < nparts * nparts; i++) qhead[i] = -1;
    uint64_t state = seed * 0x2545F4914F6CDD1DULL + 7;
    for (int64_t b = 0; b < nb; b++) blocks[b] = b;
    shuffle(blocks, nb, &state);
    int32_t *mine = gpart + lo;  /* this rank's entries: kept current as vertices move */
    for (int64_t i = 0; i < n; i++) mine[i] = (int32_t)part[i];
    int64_t moved = 0;
    for (int64_t bi = 0; bi < nb; bi++) {
        int64_t v0 = blocks[bi] * BLK, v1 = v0 + BLK < n ? v0 + BLK : n, eend = xadj[v1];
        for (int64_t v = v0; v < v1; v++) {
            int64_t nt = 0;
            for (int64_t e = xadj[v]; e < xadj[v + 1]; e++) {
                if (e + PF < eend) __builtin_prefetch(&gpart[adjncy[e + PF]]);
                int64_t q = gpart[adjncy[e]];
                if (conn[q] == 0) touched[nt++] = q;
                conn[q] += adjwgt ? adjwgt[e] : 1;
            }
            int64_t cur = mine[v], best = cur, bestc = conn[cur], want = cur, wantc = conn[cur];
            for (int64_t t = 0; t < nt; t++) {
                int64_t q = touched[t], c = conn[q];
                conn[q] = 0;
                if (q == cur) continue;
                if (c > wantc) { want = q; wantc = c; }
                if (c <= bestc) continue;
                int fits = 1;
                for (int64_t j = 0; j < ncon; j++)
                    if (w[v * ncon + j] && pw[q * ncon + j] + w[v * ncon + j] > cap[q * ncon + j]) { fits = 0; break; }
                if (fits) { best = q; bestc = c; }
            }
            conn[cur] = 0;
            if (best != cur) {
                move_to(w, ncon, pw, mine, part, v, cur, best);
                moved++;
            } else if (swap && want != cur) {     /* its better part is full: a swap, or wait */
                int64_t *h = &qhead[want * nparts + cur], u = -1;
                while (*h >= 0) {
                    u = *h;
                    *h = qnext[u];
                    if (mine[u] == want) break;
                    u = -1;
                }
                if (u >= 0 && swap_fits(w, ncon, pw, cap, v, u, cur, want)) {
                    move_to(w, ncon, pw, mine, part, v, cur, want);
                    move_to(w, ncon, pw, mine, part, u, want, cur);
                    moved += 2;
                } else {
                    if (u >= 0) { qnext[u] = *h; *h = u; }
                    qnext[v] = qhead[cur * nparts + want];
                    qhead[cur * nparts + want] = v;
                }
            }
        }
    }
    free(conn); free(touched); free(blocks); free(qhead); free(qnext);
    return moved;
}

int64_t hg_ghost_mark(const int64_t *adjncy, int64_t m, int64_t lo, int64_t hi, int64_t N, uint64_t *bits) {
    int64_t bad = 0;
    for (int64_t e = 0; e < m; e++) {
        int64_t v = adjncy[e];
        if (v >= lo && v < hi) continue;
        if (v < 0 || v >= N) { bad++; continue; }
        bits[v >> 6] |= 1ULL << (v & 63);
    }
    return bad;
}

void hg_ghost_local(int64_t *adjncy, int64_t m, int64_t lo, int64_t hi, const uint64_t *bits,
                    const int64_t *before) {
    int64_t n = hi - lo;
    for (int64_t e = 0; e < m; e++) {
        int64_t v = adjncy[e];
        if (v >= lo && v < hi) { adjncy[e] = v - lo; continue; }
        uint64_t below = bits[v >> 6] & ((1ULL << (v & 63)) - 1);
        adjncy[e] = n + before[v >> 6] + __builtin_popcountll(below);
    }
}

void hg_ghost_global(int64_t *adjncy, int64_t m, int64_t lo, int64_t n, const int64_t *ids) {
    for (int64_t e = 0; e < m; e++) {
        int64_t v = adjncy[e];
        adjncy[e] = v < n ? v + lo : ids[v - n];
    }
}

int64_t hg_ghost_prefix(const uint64_t *bits, int64_t nw, int64_t *before) {
    int64_t total = 0;
    for (int64_t w = 0; w < nw; w++) {
        before[w] = total;
        total += __builtin_popcountll(bits[w]);
    }
    return total;
}

int64_t hg_lp_sweep(int64_t n, const int64_t *xadj, const int64_t *adjncy, const int64_t *adjwgt,
                    const int64_t *w, int32_t *clab, int64_t *cw, const int64_t *cid, int64_t bound,
                    const int64_t *blocks, int64_t nblocks, uint64_t seed, int up, int64_t *scanned) {
    if (n <= 0 || nblocks <= 0) return 0;
    int64_t maxdeg = 0;
    for (int64_t bi = 0; bi < nblocks; bi++) {
        int64_t v0 = blocks[bi] * BLK, v1 = v0 + BLK < n ? v0 + BLK : n;
        for (int64_t v = v0; v < v1; v++) if (xadj[v + 1] - xadj[v] > maxdeg) maxdeg = xadj[v + 1] - xadj[v];
    }
    counter cnt = {0};
    if (counter_init(&cnt, maxdeg) < 0) { counter_free(&cnt); return -1; }
    uint64_t state = mix(seed * 0x2545F4914F6CDD1DULL + 3);
    int64_t moved = 0, edges = 0;
    for (int64_t bi = 0; bi < nblocks; bi++) {
        int64_t v0 = blocks[bi] * BLK, v1 = v0 + BLK < n ? v0 + BLK : n, eend = xadj[v1];
        edges += eend - xadj[v0];
        for (int64_t v = v0; v < v1; v++) {
            counter_size(&cnt, xadj[v + 1] - xadj[v]);
            for (int64_t e = xadj[v]; e < xadj[v + 1]; e++) {
                if (e + PF < eend) __builtin_prefetch(&clab[adjncy[e + PF]]);
                counter_add(&cnt, clab[adjncy[e]], adjwgt ? adjwgt[e] : 1);
            }
            int32_t cur = clab[v], best = cur;
            int64_t bestr = counter_get(&cnt, cur);
            uint64_t besth = 0, hcur = up ? mix((uint64_t)cid[cur] ^ state) : 0;
            for (int64_t t = 0; t < cnt.nused; t++) {
                int32_t s = cnt.used[t], c = cnt.key[s];
                int64_t rc = cnt.val[s];
                if (c == cur || rc < bestr) continue;
                if (rc == bestr && best == cur) continue;
                if (cw[c] + w[v] > bound) continue;
                uint64_t h = mix((uint64_t)cid[c] ^ state);
                if (up && h <= hcur) continue;
                if (rc > bestr || h > besth) { best = c; bestr = rc; besth = h; }
            }
            counter_clear(&cnt);
            if (best != cur) { cw[best] += w[v]; clab[v] = best; moved++; }
        }
    }
    counter_free(&cnt);
    *scanned = edges;
    return moved;
}


/* Open addressing from a label to its position in uniq (keys -1: empty). */
typedef struct { int64_t *key; int32_t *pos; uint64_t mask; } label_map;

static inline int32_t label_pos(label_map *m, int64_t lab, int64_t *uniq, int64_t *k) {
    uint64_t s = mix((uint64_t)lab) & m->mask;
    while (m->key[s] != -1) {
        if (m->key[s] == lab) return m->pos[s];
        s = (s + 1) & m->mask;
    }
    m->key[s] = lab;
    m->pos[s] = (int32_t)*k;
    uniq[*k] = lab;
    return (int32_t)(*k)++;
}

int64_t hg_lp_view_labels(int64_t n, const int64_t *xadj, const int64_t *adjncy, const int64_t *blocks,
                          int64_t nblocks, const int64_t *glab, uint8_t *mark, int32_t *clab, int64_t *uniq,
                          int64_t cap) {
    uint64_t slots = 16;
    while (slots < 2 * (uint64_t)cap) slots <<= 1;
    label_map m = {malloc(slots * sizeof(int64_t)), malloc(slots * sizeof(int32_t)), slots - 1};
    if (!m.key || !m.pos) { free(m.key); free(m.pos); return -1; }
    memset(m.key, 0xff, slots * sizeof(int64_t));
    int64_t k = 0;
    for (int64_t bi = 0; bi < nblocks; bi++) {
        int64_t v0 = blocks[bi] * BLK, v1 = v0 + BLK < n ? v0 + BLK : n;
        for (int64_t v = v0; v < v1; v++)
            if (!mark[v]) { mark[v] = 1; clab[v] = label_pos(&m, glab[v], uniq, &k); }
        for (int64_t e = xadj[v0]; e < xadj[v1]; e++) {
            int64_t t = adjncy[e];
            if (!mark[t]) { mark[t] = 1; clab[t] = label_pos(&m, glab[t], uniq, &k); }
        }
    }
    for (int64_t bi = 0; bi < nblocks; bi++) {      /* the scratch back to zero */
        int64_t v0 = blocks[bi] * BLK, v1 = v0 + BLK < n ? v0 + BLK : n;
        memset(mark + v0, 0, (size_t)(v1 - v0));
        for (int64_t e = xadj[v0]; e < xadj[v1]; e++) mark[adjncy[e]] = 0;
    }
    free(m.key); free(m.pos);
    return k;
}
