/* The gpu matcher's kernel: one source, two compilers.
 *
 * NVRTC compiles this file for the device (match_kernel, at the end). The host C compiler
 * compiles it too (host.c includes it), so that the tests check match_one against `linear` on
 * every machine, GPU or not: what CI proves about the CPU build holds for the device's logic.
 * Keep it to the subset of C that is also CUDA C++.
 *
 * The rule structure is one flat array of u32 words, the *image* (built and checked by
 * image.rs): the fast matcher's tree with every reference turned into a word offset into the
 * image, so the kernel needs one pointer and the host one upload. Layout:
 *   header  H_* words below;
 *   node    NODE_WORDS words at its offset: tag, crit, start, len, wild, min_rank, ncols, 0;
 *   dense   a split's children: image[start + code] for code < len (NONE = no child);
 *   sparse  a split's sorted keys at image[start .. start + len], children right after them;
 *   leaf    at image[start]: ncols criteria, then len entries [rank, lo_0, hi_0, lo_1, ...];
 *   parts   mandatory-criteria partitions: crits, then each one's code bound (its
 *           cardinality: a code at or above it names no rule), radices (u64 as lo, hi), and an
 *           open-addressing table of (key + 1 as lo, hi; node), key + 1 == 0 for an empty slot.
 * Semantics are `linear`'s: the matching rule of smallest rank (score descending, input order
 * ascending) wins, and the answer is its rule index, or NONE.
 */
#ifndef OFFLOAD_FN
#define OFFLOAD_FN __device__ __forceinline__
#endif

typedef unsigned int u32;
typedef unsigned long long u64;
/* A query's codes: 32-bit, or 16-bit where every criterion has fewer than 65,536 codes (the
 * host then narrows them, halving the bytes it stages and sends). NVRTC builds both. */
#ifndef QCODE
#define QCODE u32
#endif
typedef QCODE qcode;

#define NONE 0xFFFFFFFFu
#define MAGIC 0x4F464732u /* "OFG2": this layout, version 2 (partition code bounds) */
#define NODE_WORDS 8
/* Pending subtrees a search keeps; image.rs refuses a tree that could need more. */
#define STACK_DEPTH 48

enum {
    H_MAGIC, H_WIDTH, H_ROOT, H_NPART, H_PART_MASK, H_PART_CRITS, H_PART_RADIX, H_PART_SLOTS,
    H_RULE_OF_RANK, H_NODES, H_WORDS
};
enum { N_TAG, N_CRIT, N_START, N_LEN, N_WILD, N_MIN_RANK, N_NCOLS };
enum { TAG_LEAF = 1, TAG_SPARSE = 2, TAG_COPY_WILD = 4 };

OFFLOAD_FN u64 load_u64(const u32* img, u32 at) {
    return ((u64)img[at + 1] << 32) | (u64)img[at];
}

/* The subtree of the partition holding the query's mandatory tuple, or NONE. */
OFFLOAD_FN u32 partition_root(const u32* img, const qcode* q) {
    u32 n = img[H_NPART], crits = img[H_PART_CRITS], radix = img[H_PART_RADIX];
    u32 slots = img[H_PART_SLOTS], mask = img[H_PART_MASK];
    u64 key = 0;
    for (u32 i = 0; i < n; i++) {
        u32 v = q[img[crits + i]];
        if (v >= img[crits + n + i]) return NONE; /* no rule's value; its key would alias */
        key += (u64)v * load_u64(img, radix + 2 * i);
    }
    /* Every code is below its cardinality, so the mixed-radix key is exact. */
    u32 s = (u32)(((key + 1) * 0x9E3779B97F4A7C15ull) >> 32) & mask;
    for (;;) {
        u64 k = load_u64(img, slots + 3 * s);
        if (k == key + 1) return img[slots + 3 * s + 2];
        if (k == 0) return NONE;
        s = (s + 1) & mask;
    }
}

/* The child of split `node` for code v, or NONE. */
OFFLOAD_FN u32 child_of(const u32* img, const u32* node, u32 v) {
    u32 start = node[N_START], len = node[N_LEN];
    if (!(node[N_TAG] & TAG_SPARSE)) return v < len ? img[start + v] : NONE;
    u32 lo = 0, hi = len; /* first key >= v in [lo, hi) */
    while (lo < hi) {
        u32 mid = lo + (hi - lo) / 2;
        if (img[start + mid] < v) lo = mid + 1; else hi = mid;
    }
    return (lo < len && img[start + lo] == v) ? img[start + len + lo] : NONE;
}

/* Lowers best to the first entry of the leaf (in rank order) that matches q. */
OFFLOAD_FN u32 scan_leaf(const u32* img, const u32* node, const qcode* q, u32 best) {
    u32 nc = node[N_NCOLS], len = node[N_LEN];
    const u32* cols = img + node[N_START];
    const u32* e = cols + nc;
    for (u32 j = 0; j < len; j++, e += 1 + 2 * nc) {
        if (e[0] >= best) return best;
        u32 x = 0;
        while (x < nc) {
            u32 v = q[cols[x]];
            if (v < e[1 + 2 * x] || v > e[2 + 2 * x]) break;
            x++;
        }
        if (x == nc) return e[0];
    }
    return best;
}

/* The winning rule index for query q (width codes), or NONE. */
OFFLOAD_FN u32 match_one(const u32* img, const qcode* q) {
    u32 stack[STACK_DEPTH];
    u32 sp = 0, best = NONE;
    u32 id = img[H_NPART] ? partition_root(img, q) : img[H_ROOT];
    for (;;) {
        if (id == NONE) {
            if (sp == 0) break;
            id = stack[--sp];
            continue;
        }
        const u32* node = img + id;
        if (node[N_MIN_RANK] >= best) {
            id = NONE;
        } else if (node[N_TAG] & TAG_LEAF) {
            best = scan_leaf(img, node, q, best);
            id = NONE;
        } else {
            u32 child = child_of(img, node, q[node[N_CRIT]]), wild = node[N_WILD];
            if (node[N_TAG] & TAG_COPY_WILD) {
                id = child != NONE ? child : wild;
            } else if (child == NONE || wild == NONE) {
                id = child == NONE ? wild : child;
            } else {
                /* Both: the more promising first, so the other is more often pruned. */
                int child_first = img[child + N_MIN_RANK] <= img[wild + N_MIN_RANK];
                stack[sp++] = child_first ? wild : child;
                id = child_first ? child : wild;
            }
        }
    }
    return best == NONE ? NONE : img[img[H_RULE_OF_RANK] + best];
}

#ifdef __CUDACC__
/* One thread per query, grid-stride, queries row-major (width codes each). */
extern "C" __global__ void match_kernel(const u32* __restrict__ img, const qcode* __restrict__ queries, u32 n,
                                        u32* __restrict__ out) {
    u32 width = img[H_WIDTH];
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        out[i] = match_one(img, queries + (u64)i * width);
    }
}
#endif
