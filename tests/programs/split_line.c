/* One leaking line with two calls of malloc that the compiler keeps apart:
 * the first epochs' blocks come from one call, the later epochs' from the
 * other, as CPython's eval loop takes another native path to the same
 * Python line once an instruction is specialized. Two return addresses, so
 * two stack ids, whose frames symbolize the same: one site, one suspect
 * with every epoch's blocks. */
#include <stdlib.h>
#include "mark.h"

#define EPOCHS_MAX 64
#define PER_EPOCH 100
#define BLOCK 3000
/* The epoch from which the second call allocates. */
#define SWITCH_EPOCH 2
void *early[EPOCHS_MAX * PER_EPOCH], *later[EPOCHS_MAX * PER_EPOCH];
int early_count, later_count;

__attribute__((noinline)) void keep_blocks(int epoch) {
    for (int i = 0; i < PER_EPOCH; i++) {
        if (epoch < SWITCH_EPOCH) early[early_count++] = malloc(BLOCK); else later[later_count++] = malloc(BLOCK); /* the leaking line */
    }
}

int main(int argc, char **argv) {
    int epochs = argc > 1 ? atoi(argv[1]) : 8;
    if (epochs > EPOCHS_MAX) epochs = EPOCHS_MAX;
    for (int epoch = 0; epoch < epochs; epoch++) {
        keep_blocks(epoch);
        mark_epoch(epoch);
    }
    printf("split_line: %d epochs, %d blocks kept from the first call, %d from the second\n", epochs, early_count,
           later_count);
    return 0;
}
