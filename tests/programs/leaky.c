/* One real per-epoch leak among the decoys a leak finder must not report:
 * warm-up memory kept forever, a cache that fills once, buffers freed one
 * epoch later, and per-step temporaries. Pointers live in globals so the
 * compiler cannot elide the allocations. */
#include <stdlib.h>
#include <string.h>
#include "mark.h"

#define EPOCHS_MAX 64
void *leaked[EPOCHS_MAX * 200];
int leaked_count;
void *warm_up;
void *cache[64];
void *previous_buffer;
void *volatile sink;

__attribute__((noinline)) void leak_per_epoch(void) {
    for (int i = 0; i < 200; i++) {
        leaked[leaked_count] = malloc(1000 + i);
        memset(leaked[leaked_count++], 1, 16);
    }
}

__attribute__((noinline)) void warm_up_once(void) {
    warm_up = malloc(4 << 20);
    memset(warm_up, 0, 4096);
}

__attribute__((noinline)) void fill_cache(void) {
    for (int i = 0; i < 64; i++)
        if (!cache[i]) cache[i] = calloc(1, 8192);
}

__attribute__((noinline)) void rotate_buffer(void) {
    free(previous_buffer);
    previous_buffer = malloc(256 << 10);
    memset(previous_buffer, 2, 64);
}

__attribute__((noinline)) void step_temporaries(void) {
    for (int i = 0; i < 2000; i++) {
        char *p = malloc(64 + i % 512);
        p[0] = (char)i;
        sink = p;
        free(p);
    }
}

int main(int argc, char **argv) {
    int epochs = argc > 1 ? atoi(argv[1]) : 8;
    if (epochs > EPOCHS_MAX) epochs = EPOCHS_MAX;
    warm_up_once();
    for (int epoch = 0; epoch < epochs; epoch++) {
        fill_cache();
        rotate_buffer();
        step_temporaries();
        leak_per_epoch();
        mark_epoch(epoch);
    }
    printf("leaky: %d epochs, %d blocks leaked\n", epochs, leaked_count);
    return 0;
}
