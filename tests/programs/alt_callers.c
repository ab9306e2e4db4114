/* One leaking helper, called from train_step in even epochs and from
 * eval_step in odd ones: two stacks that differ above the line that leaks,
 * each with survivors of about half the epochs. With "phases" after the
 * epoch count, from train_step in the first three quarters of the epochs
 * and from eval_step in the last: the first stack's survivors stop four
 * epochs before the end, the line's go on. With "one_stops", from
 * train_step in every epoch and from eval_step too in the first four:
 * the second stack stops while the first goes on. */
#include <stdlib.h>
#include <string.h>
#include "mark.h"

#define EPOCHS_MAX 64
#define PER_EPOCH 50
#define BLOCK 1000
void *kept[EPOCHS_MAX * PER_EPOCH];
int kept_count;

__attribute__((noinline)) void cache_result(void) {
    void *block = malloc(BLOCK); /* the leaking line */
    memset(block, 1, BLOCK);
    kept[kept_count++] = block;
}

__attribute__((noinline)) void train_step(void) {
    for (int i = 0; i < PER_EPOCH; i++) cache_result();
    __asm__ volatile("");
}

__attribute__((noinline)) void eval_step(void) {
    for (int i = 0; i < PER_EPOCH; i++) cache_result();
    __asm__ volatile("");
}

int main(int argc, char **argv) {
    int epochs = argc > 1 ? atoi(argv[1]) : 8;
    if (epochs > EPOCHS_MAX) epochs = EPOCHS_MAX;
    int phases = argc > 2 && strcmp(argv[2], "phases") == 0;
    int one_stops = argc > 2 && strcmp(argv[2], "one_stops") == 0;
    for (int epoch = 0; epoch < epochs; epoch++) {
        if (one_stops) {
            train_step();
            if (epoch < 4) eval_step();
        } else if (phases ? epoch < epochs * 3 / 4 : epoch % 2 == 0) {
            train_step();
        } else {
            eval_step();
        }
        mark_epoch(epoch);
    }
    printf("alt_callers: %d epochs, %d blocks kept\n", epochs, kept_count);
    return 0;
}
