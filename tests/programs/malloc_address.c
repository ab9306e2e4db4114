/* Takes malloc's address in its code and allocates through it, as
 * CPython does. Built as position-dependent code without PIE (as Debian's
 * python3 is), the program then holds an undefined entry for malloc whose
 * value is its PLT stub, and dlsym(RTLD_DEFAULT, "malloc") returns that
 * stub: the program does not define malloc, and its calls reach the first
 * library that does. Leaks 64 blocks an epoch for 8 epochs. */
#include <stdio.h>
#include <stdlib.h>
#include "mark.h"

void *(*volatile allocate)(size_t);
void *kept[8 * 64];

__attribute__((noinline)) void keep_blocks(int epoch) {
    for (int i = 0; i < 64; i++) kept[epoch * 64 + i] = allocate(4096);
}

int main(void) {
    allocate = malloc;
    for (int epoch = 0; epoch < 8; epoch++) {
        keep_blocks(epoch);
        mark_epoch(epoch);
    }
    printf("malloc_address: %d blocks kept\n", 8 * 64);
    return 0;
}
