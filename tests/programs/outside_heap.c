/* RSS grows every epoch through anonymous mmap while the malloc heap stays flat. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "mark.h"

void *volatile sink;

int main(void) {
    for (int epoch = 0; epoch < 8; epoch++) {
        char *region = mmap(NULL, 16 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memset(region, 1, 16 << 20);
        for (int i = 0; i < 1000; i++) {
            void *p = malloc(200);
            sink = p;
            free(p);
        }
        mark_epoch(epoch);
    }
    printf("outside_heap: done\n");
    return 0;
}
