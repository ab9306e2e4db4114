/* Successful calls leave errno as they found it, also when the tracer's own
   system calls fail: every descriptor is taken (the tracer cannot open
   /proc files at its snapshots, nor to learn a mapping's kind or a new
   thread's stack), then malloc in a new thread and in this one, epochs
   marked, and an mremap of a mapping made before
   the tracer recorded anything. Prints the first call that changed
   errno, or that none did. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include "mark.h"

static int changed(const char *call) {
    if (errno == 1234) return 0;
    printf("errno changed by %s: %d\n", call, errno);
    return 1;
}

/* A new thread's first captured allocation: the tracer learns the
   thread's stack bounds from /proc then. */
static void *allocate_in_a_thread(void *unused) {
    (void)unused;
    errno = 1234;
    void *block = malloc(64 << 10);
    return (void *)(long)(block && !changed("malloc in a new thread"));
}

int main(void) {
    size_t len = 4096; /* small: the warm-up seldom draws it, so its kind is read from /proc */
    char *shared = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) return 2;
    /* Take every descriptor below a low limit. */
    struct rlimit limit = {32, 32};
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return 2;
    while (open("/dev/null", O_RDONLY) >= 0) {
    }
    pthread_t thread;
    void *ok = NULL;
    if (pthread_create(&thread, NULL, allocate_in_a_thread, NULL) != 0 || pthread_join(thread, &ok) != 0) return 2;
    if (!ok) return 1;
    void *kept[64];
    for (int epoch = 0; epoch < 8; epoch++) {
        errno = 1234;
        kept[epoch] = malloc(64 << 10);
        if (!kept[epoch] || changed("malloc")) return 1;
        mark_epoch(epoch);
        if (changed("tracer_mark")) return 1;
    }
    errno = 1234;
    char *grown = mremap(shared, len, 2 * len, MREMAP_MAYMOVE);
    if (grown == MAP_FAILED || changed("mremap")) return 1;
    memset(grown, 1, 2 * len);
    printf("errno kept\n");
    return 0;
}
