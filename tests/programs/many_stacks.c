/* 2^17 distinct stacks in one epoch: at each of 17 levels the call goes
 * through one of two call sites, chosen by one bit of the block's number. */
#include <stdlib.h>
#include "mark.h"

#define LEVELS 17

void *volatile blocks[1 << LEVELS];

__attribute__((noinline)) static void descend(unsigned number, int level);

__attribute__((noinline)) static void left(unsigned number, int level) {
    descend(number, level + 1);
    __asm__ volatile("" ::: "memory"); /* keeps the call from becoming a jump */
}

__attribute__((noinline)) static void right(unsigned number, int level) {
    descend(number, level + 1);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void descend(unsigned number, int level) {
    if (level == LEVELS) {
        blocks[number] = malloc(16);
    } else if (number >> level & 1) {
        right(number, level);
    } else {
        left(number, level);
    }
    __asm__ volatile("" ::: "memory");
}

int main(void) {
    for (unsigned number = 0; number < 1u << LEVELS; number++) descend(number, 0);
    mark_epoch(0);
    printf("many_stacks: %d blocks\n", 1 << LEVELS);
    return 0;
}
