/* The gpu matcher's kernel logic built for the CPU: the same match.cu, with plain C functions
 * in place of device ones. The tests run it against `linear`, and the `gpu-host` matcher runs
 * it, so the logic the device runs is checked on machines without a GPU. */
#include <stddef.h>
#include <stdint.h>

#define OFFLOAD_FN static inline
#include "match.cu"

/* Answers n queries (width codes each, row-major) against a checked image. */
void offload_gpu_match_host(const u32* img, const u32* queries, size_t n, u32* out) {
    size_t width = img[H_WIDTH];
    for (size_t i = 0; i < n; i++) out[i] = match_one(img, queries + i * width);
}
