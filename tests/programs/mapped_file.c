/* RSS grows every epoch while the live heap and the traced mappings stay
 * flat: the program reads a file it mapped, 4 MiB more of it an epoch, as a
 * training job reads a memory-mapped dataset (np.memmap, Arrow). The pages
 * read are the file's, resident in the process, and the kernel can take
 * them back; a read-only file mapping is not traced.
 *
 *     mapped_file DIR        (the file is made in DIR and removed at once)
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include "mark.h"

#define EPOCHS 8
#define PER_EPOCH (4 << 20)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: mapped_file DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/mapped_file.data", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || unlink(path) != 0) {
        perror("mapped_file: open");
        return 1;
    }
    static char chunk[1 << 16];
    for (size_t i = 0; i < sizeof chunk; i++) chunk[i] = (char)i;
    for (long written = 0; written < (long)EPOCHS * PER_EPOCH; written += sizeof chunk) {
        if (write(fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk) {
            perror("mapped_file: write");
            return 1;
        }
    }
    const unsigned char *data = mmap(NULL, (size_t)EPOCHS * PER_EPOCH, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
        perror("mapped_file: mmap");
        return 1;
    }
    unsigned long sum = 0;
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        for (long offset = 0; offset < PER_EPOCH; offset += 4096) {
            sum += data[(long)epoch * PER_EPOCH + offset];
        }
        mark_epoch(epoch);
    }
    printf("mapped_file: %d epochs, %d MiB read, sum %lu\n", EPOCHS, EPOCHS * (PER_EPOCH >> 20), sum);
    return 0;
}
