/* RSS grows every epoch through shared memory while the malloc heap stays
 * flat: pages of a memfd mapped shared and written, as PyTorch's
 * shared-memory tensors are (a file mapping, not an anonymous one). With
 * the argument `raw` the mapping is made by the system call itself, which
 * no library function sees: memory outside what the tracer can see. With
 * `grow` the first half is mapped and mremap grows the mapping to the
 * whole file: the pages it adds are shared memory too. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "mark.h"

#define REGION (16 << 20)

void *volatile sink;

static char *map_shared(int fd, int raw, size_t len) {
    if (raw) {
        return (char *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0); /* the shared memory kept */
}

static char *grow_shared(char *region, size_t from, size_t to) {
    return mremap(region, from, to, MREMAP_MAYMOVE); /* the shared memory grown */
}

int main(int argc, char **argv) {
    int raw = argc > 1 && strcmp(argv[1], "raw") == 0;
    int grow = argc > 1 && strcmp(argv[1], "grow") == 0;
    for (int epoch = 0; epoch < 8; epoch++) {
        int fd = memfd_create("shared_memory", 0);
        if (fd < 0 || ftruncate(fd, REGION) != 0) {
            perror("memfd_create");
            return 1;
        }
        char *region = map_shared(fd, raw, grow ? REGION / 2 : REGION);
        if (region != MAP_FAILED && grow) {
            region = grow_shared(region, REGION / 2, REGION);
        }
        if (region == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        close(fd);
        memset(region, 1, REGION);
        for (int i = 0; i < 1000; i++) {
            void *p = malloc(200);
            sink = p;
            free(p);
        }
        mark_epoch(epoch);
    }
    printf("shared_memory: done\n");
    return 0;
}
