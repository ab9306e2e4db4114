/* Deletes the file named by its argument (its trace) after its second
 * epoch and goes on for six more, printing one line an epoch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mark.h"

void *kept[8 * 100];

int main(int argc, char **argv) {
    for (int epoch = 0; epoch < 8; epoch++) {
        for (int i = 0; i < 100; i++) memset(kept[epoch * 100 + i] = malloc(512), 1, 16);
        mark_epoch(epoch);
        if (epoch == 1 && argc > 1) unlink(argv[1]);
        printf("epoch %d\n", epoch);
    }
    return 0;
}
