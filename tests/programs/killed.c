/* Leaks every epoch until it is killed; prints each epoch as it is marked. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mark.h"

void *leaked[1 << 20];
int leaked_count;

__attribute__((noinline)) void leak_until_killed(void) {
    for (int i = 0; i < 300; i++) {
        leaked[leaked_count] = malloc(700);
        memset(leaked[leaked_count++], 3, 8);
    }
}

int main(void) {
    for (int epoch = 0;; epoch++) {
        leak_until_killed();
        mark_epoch(epoch);
        printf("epoch %d\n", epoch);
        fflush(stdout);
        usleep(20000);
    }
}
