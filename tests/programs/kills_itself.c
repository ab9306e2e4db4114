/* Leaks every epoch, then ends by sending itself SIGTERM, left to its
 * default action: the process dies of the signal without calling exit.
 * With the argument `raise`, sends it with raise(), as C's standard way. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "mark.h"

#define EPOCHS 6

void *kept[EPOCHS * 50];
int kept_count;

__attribute__((noinline)) void leak_before_the_signal(void) {
    for (int i = 0; i < 50; i++) kept[kept_count++] = malloc(3000);
}

int main(int argc, char **argv) {
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        leak_before_the_signal();
        mark_epoch(epoch);
    }
    printf("kills_itself: %d blocks kept\n", kept_count);
    fflush(stdout);
    if (argc > 1 && argv[1][0] == 'r') {
        raise(SIGTERM);
    } else {
        kill(getpid(), SIGTERM);
    }
    return 1; /* not reached */
}
