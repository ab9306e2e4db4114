/* Never marks an epoch, and allocates rarely: one block of 10,000 bytes,
 * kept, every 50 ms for a second (20 allocations in all). With "burst",
 * it first makes a million small allocations as fast as it can, as a
 * program's start-up (importing a library) does. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

void *kept[20];
void *volatile sink;

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "burst") == 0) {
        for (int i = 0; i < 1000000; i++) {
            sink = malloc(32);
            free(sink);
        }
    }
    struct timespec pause = {0, 50000000};
    for (int i = 0; i < 20; i++) {
        kept[i] = malloc(10000);
        memset(kept[i], 1, 10000);
        nanosleep(&pause, NULL);
    }
    return 0;
}
