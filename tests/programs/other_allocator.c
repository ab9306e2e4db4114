/* Leaks through each allocation entry point every epoch, and asks the
 * allocator for each block's usable size: under an allocator preloaded after
 * the tracer (jemalloc), every block must be that allocator's, which answers
 * for its own blocks only. Exits 3 when a size is wrong. */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include "mark.h"

#define EPOCHS_MAX 64
void *leaked[EPOCHS_MAX * 400];
int leaked_count;

static void keep(void *block, size_t size) {
    if (!block || malloc_usable_size(block) < size) exit(3);
    memset(block, 1, size);
    leaked[leaked_count++] = block;
}

__attribute__((noinline)) void leak_through_every_entry(void) {
    for (int i = 0; i < 100; i++) {
        keep(malloc(900 + i), 900 + i);
        keep(calloc(1, 700 + i), 700 + i);
        void *grown = realloc(malloc(64), 1100 + i);
        keep(grown, 1100 + i);
        void *aligned = NULL;
        if (posix_memalign(&aligned, 64, 1300 + i) != 0) exit(3);
        keep(aligned, 1300 + i);
    }
}

__attribute__((noinline)) void churn(void) {
    for (int i = 0; i < 1000; i++) {
        void *temporary = malloc(4000 + i);
        if (malloc_usable_size(temporary) < 4000u + i) exit(3);
        free(realloc(temporary, 9000 + i));
    }
}

int main(int argc, char **argv) {
    int epochs = argc > 1 ? atoi(argv[1]) : 8;
    if (epochs > EPOCHS_MAX) epochs = EPOCHS_MAX;
    for (int epoch = 0; epoch < epochs; epoch++) {
        leak_through_every_entry();
        churn();
        mark_epoch(epoch);
    }
    return 0;
}
