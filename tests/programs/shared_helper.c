/* A helper that allocates records for three callers, only one of which
 * keeps them (64 of 4 KiB an epoch); the others free theirs at once. */
#include <stdlib.h>
#include <string.h>
#include "mark.h"

static void *kept[64 * 16];
static int kept_count;

__attribute__((noinline)) void *make_record(size_t size) {
    void *record = malloc(size); /* the helper's allocation */
    memset(record, 1, size);
    return record;
}

__attribute__((noinline)) void validate_batch(void) {
    free(make_record(4096));
    __asm__ volatile("");
}

__attribute__((noinline)) void ingest_batch(void) {
    kept[kept_count++] = make_record(4096); /* the caller that keeps them */
    __asm__ volatile("");
}

__attribute__((noinline)) void log_batch(void) {
    free(make_record(4096));
    __asm__ volatile("");
}

int main(void) {
    for (int epoch = 0; epoch < 10; epoch++) {
        for (int step = 0; step < 64; step++) {
            validate_batch();
            ingest_batch();
            log_batch();
        }
        mark_epoch(epoch);
    }
    return 0;
}
