/* Never marks an epoch, and allocates rarely: one block of 10,000 bytes,
 * kept, every 50 ms for a second (20 allocations in all). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

void *kept[20];

int main(void) {
    struct timespec pause = {0, 50000000};
    for (int i = 0; i < 20; i++) {
        kept[i] = malloc(10000);
        memset(kept[i], 1, 10000);
        nanosleep(&pause, NULL);
    }
    return 0;
}
