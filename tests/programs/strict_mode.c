/* Marks two epochs, enters seccomp's strict mode (read, write, exit and
 * sigreturn left; the time-stamp counter taken away), then allocates and
 * frees small blocks from the heap it has, which makes no system call,
 * writes a line and exits with 7 through the exit system call. */
#define _GNU_SOURCE
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "mark.h"

void *volatile sink;

int main(void) {
    for (int epoch = 0; epoch < 2; epoch++) {
        void *kept[64];
        for (int i = 0; i < 64; i++) kept[i] = malloc(64);
        for (int i = 0; i < 64; i++) free(kept[i]);
        mark_epoch(epoch);
    }
    char line[64];
    int length = snprintf(line, sizeof line, "in strict mode\n");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0) return 1;
    for (int i = 0; i < 100000; i++) {
        sink = malloc(32 + (i & 63));
        free(sink);
    }
    write(1, line, length);
    syscall(SYS_exit, 7);
}
