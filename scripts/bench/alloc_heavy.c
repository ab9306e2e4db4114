/* Allocation-heavy workload: threads doing malloc/free of mixed sizes at a
 * fixed stack depth, built without frame pointers. */
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>

static int threads = 2, depth = 20;
static long pairs_per_thread = 2000000;
void *volatile sink;

__attribute__((noinline)) static void allocate_at_depth(int level, long count, unsigned seed) {
    if (level > 0) {
        allocate_at_depth(level - 1, count, seed);
        sink = &seed;
        return;
    }
    void *held[16] = {0};
    for (long i = 0; i < count; i++) {
        seed = seed * 1103515245u + 12345u;
        int slot = (seed >> 8) & 15;
        free(held[slot]);
        held[slot] = malloc(16 + (seed >> 16) % 4096);
    }
    for (int i = 0; i < 16; i++) free(held[i]);
}

static void *worker(void *arg) {
    allocate_at_depth(depth, pairs_per_thread, (unsigned)(long)arg);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) threads = atoi(argv[1]);
    if (argc > 2) pairs_per_thread = atol(argv[2]);
    if (argc > 3) depth = atoi(argv[3]);
    pthread_t t[64];
    for (long i = 0; i < threads && i < 64; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (long i = 0; i < threads && i < 64; i++) pthread_join(t[i], NULL);
    return 0;
}
