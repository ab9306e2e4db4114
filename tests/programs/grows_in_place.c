/* A history buffer realloc'd 64 KiB larger every epoch and never
 * shrunk: one block alive at any time, its newest copy, while the heap
 * rises by the growth. Nothing piles up, and nothing else grows. */
#include <stdlib.h>
#include <string.h>
#include "mark.h"

#define EPOCHS 8
#define STEP (64 << 10)

char *history;
size_t history_len;

__attribute__((noinline)) void append_history(void) {
    history = realloc(history, history_len + STEP); /* the growing line */
    memset(history + history_len, 1, STEP);
    history_len += STEP;
}

/* Made and freed within each epoch: no growth. */
__attribute__((noinline)) void step_temporaries(void) {
    for (int i = 0; i < 100; i++) {
        char *block = malloc(4096);
        block[0] = (char)i;
        free(block);
    }
}

int main(void) {
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        step_temporaries();
        append_history();
        mark_epoch(epoch);
    }
    return history[0] == 1 ? 0 : 1;
}
