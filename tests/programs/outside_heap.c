/* RSS grows every epoch through memory the tracer cannot see, while the
 * malloc heap stays flat: pages of a memfd mapped shared, as PyTorch's
 * shared-memory tensors are (a file mapping, not an anonymous one). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "mark.h"

#define REGION (16 << 20)

void *volatile sink;

int main(void) {
    for (int epoch = 0; epoch < 8; epoch++) {
        int fd = memfd_create("outside_heap", 0);
        if (fd < 0 || ftruncate(fd, REGION) != 0) {
            perror("memfd_create");
            return 1;
        }
        char *region = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (region == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        memset(region, 1, REGION);
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
