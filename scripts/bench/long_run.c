/* A long run for the analyzer's scale: thousands of epochs and hundreds of
 * thousands of distinct stacks. At each of LEVELS levels a call goes through
 * one of two call sites, chosen by one bit of the site's number (the lowest
 * bit at the deepest level: consecutive sites part near the allocation, as
 * the calls of a loop do), so site n allocates under its own stack. Every epoch allocates at the next `per_epoch`
 * sites (wrapping around) and frees them in the next epoch; the first pass
 * over the sites keeps one block in 64 for good (a cache that fills once);
 * and one site leaks three blocks of 4 KiB every epoch.
 *
 *     long_run EPOCHS PER_EPOCH       (defaults: 2000 512)
 */
#include <stdlib.h>
#include <string.h>
#include "../../tests/programs/mark.h"

#define LEVELS 18
#define SITES (1u << LEVELS)

static void *volatile kept[SITES / 64];
static void **previous, **current;
static int per_epoch = 512;

__attribute__((noinline)) static void descend(unsigned site, int level, void **out);

__attribute__((noinline)) static void left(unsigned site, int level, void **out) {
    descend(site, level + 1, out);
    __asm__ volatile("" ::: "memory"); /* keeps the call from becoming a jump */
}

__attribute__((noinline)) static void right(unsigned site, int level, void **out) {
    descend(site, level + 1, out);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void descend(unsigned site, int level, void **out) {
    if (level == LEVELS) {
        *out = malloc(32 + site % 256);
        memset(*out, 1, 8);
    } else if (site >> (LEVELS - 1 - level) & 1) {
        right(site, level, out);
    } else {
        left(site, level, out);
    }
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void leak_blocks(void) {
    for (int i = 0; i < 3; i++) {
        void *block = malloc(4096);
        memset(block, 2, 64);
        __asm__ volatile("" ::"r"(block) : "memory"); /* never freed */
    }
}

int main(int argc, char **argv) {
    int epochs = argc > 1 ? atoi(argv[1]) : 2000;
    if (argc > 2) per_epoch = atoi(argv[2]);
    previous = calloc(per_epoch, sizeof *previous);
    current = calloc(per_epoch, sizeof *current);
    unsigned next_site = 0;
    unsigned long allocations = 0;
    for (int epoch = 0; epoch < epochs; epoch++) {
        for (int i = 0; i < per_epoch; i++) {
            unsigned site = next_site++ % SITES;
            descend(site, 0, &current[i]);
            if (next_site <= SITES && site % 64 == 0) {
                kept[site / 64] = current[i];
                current[i] = NULL;
            }
        }
        allocations += per_epoch;
        leak_blocks();
        for (int i = 0; i < per_epoch; i++) free(previous[i]);
        void **swap = previous;
        previous = current;
        current = swap;
        mark_epoch(epoch);
    }
    printf("long_run: %d epochs, %lu allocations at %u sites\n", epochs, allocations,
           next_site < SITES ? next_site : SITES);
    return 0;
}
