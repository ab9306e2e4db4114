/* RSS grows every epoch by the pages of a file on disk that the program
 * maps shared and writable and writes, as a job filling a memory-mapped
 * array on disk: each epoch the file grows by 4 MiB, is mapped whole again
 * and its new part written, and every mapping is kept. The pages are the
 * file's, which the kernel writes back and may take: no shared memory,
 * and the mappings overlapping count the same pages again. With `grow`
 * each epoch's mapping is made half as long and grown by mremap.
 *
 *     mapped_shared_file DIR [grow]   (the file is made in DIR and removed at once)
 *
 * Exits with 3 when DIR is on tmpfs or hugetlbfs, whose files are shared
 * memory. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>
#include "mark.h"

#define EPOCHS 8
#define PER_EPOCH (4 << 20)

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: mapped_shared_file DIR [grow]\n");
        return 2;
    }
    int grow = argc > 2 && strcmp(argv[2], "grow") == 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/mapped_shared_file.data", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || unlink(path) != 0) {
        perror("mapped_shared_file: open");
        return 1;
    }
    struct statfs filesystem;
    if (fstatfs(fd, &filesystem) != 0) {
        perror("mapped_shared_file: fstatfs");
        return 1;
    }
    if (filesystem.f_type == TMPFS_MAGIC || filesystem.f_type == HUGETLBFS_MAGIC) {
        fprintf(stderr, "mapped_shared_file: %s is on tmpfs or hugetlbfs\n", argv[1]);
        return 3;
    }
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        size_t len = (size_t)(epoch + 1) * PER_EPOCH;
        if (ftruncate(fd, (off_t)len) != 0) {
            perror("mapped_shared_file: ftruncate");
            return 1;
        }
        char *data = mmap(NULL, grow ? len / 2 : len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (data != MAP_FAILED && grow) {
            data = mremap(data, len / 2, len, MREMAP_MAYMOVE);
        }
        if (data == MAP_FAILED) {
            perror("mapped_shared_file: mmap");
            return 1;
        }
        memset(data + len - PER_EPOCH, 1, PER_EPOCH);
        mark_epoch(epoch);
    }
    printf("mapped_shared_file: %d epochs, %d MiB written\n", EPOCHS, EPOCHS * (PER_EPOCH >> 20));
    return 0;
}
