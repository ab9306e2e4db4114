/* Lowers its file-size limit (`ulimit -f`) to 8 KiB, then allocates at
 * a few hundred distinct stacks over 20 marked epochs, which makes a
 * longer trace than that. The program writes no file itself: passing the
 * limit would be the trace's doing, and the kernel would end the program
 * with SIGXFSZ. Prints "file_size_limit: done".
 *
 * With an argument, a program to run, it lowers the limit to 0 instead and
 * execs that program, whose trace cannot be begun. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "mark.h"

static void *kept[2000];

static __attribute__((noinline)) void *nested(int depth, size_t size) {
    if (depth == 0) {
        return malloc(size);
    }
    void *block = nested(depth - 1, size);
    __asm__ volatile("" ::: "memory");
    return block;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        struct rlimit none = {0, 0};
        if (setrlimit(RLIMIT_FSIZE, &none) != 0) return 1;
        execv(argv[1], argv + 1);
        return 1;
    }
    struct rlimit limit = {8 << 10, 8 << 10};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) {
        perror("setrlimit");
        return 1;
    }
    for (int i = 0; i < 2000; i++) {
        kept[i] = nested(i % 300, 64);
        if (i % 100 == 99) {
            mark_epoch(i / 100);
        }
    }
    puts("file_size_limit: done");
    return 0;
}
