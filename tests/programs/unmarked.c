/* Allocates and frees for about 0.6 s without ever marking an epoch. */
#include <stdlib.h>
#include <time.h>

void *volatile sink;

int main(void) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        for (int i = 0; i < 1000; i++) {
            void *p = malloc(64 + i);
            sink = p;
            free(p);
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < 600000000L);
    return 0;
}
