/* Tries to run a program that does not exist in the middle of its third
 * epoch, and goes on when the exec fails: six marked epochs, each keeping
 * 100 blocks of 1 KiB. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "mark.h"

#define EPOCHS 6
#define BLOCKS 100

void *volatile kept[EPOCHS * BLOCKS];

static void keep_blocks(int epoch) {
    for (int i = 0; i < BLOCKS; i++) kept[epoch * BLOCKS + i] = malloc(1024);
}

int main(void) {
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        keep_blocks(epoch);
        if (epoch == 2) {
            char *argv[] = {"missing-program", NULL};
            execv("/nonexistent/missing-program", argv);
            printf("exec failed, going on\n");
        }
        mark_epoch(epoch);
    }
    return 0;
}
