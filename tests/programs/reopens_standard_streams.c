/* A daemon's start: deletes its trace (argv[1]) after its first epoch, so
 * that the tracer stops with a word on stderr at its next write, then
 * closes every descriptor, standard streams included, and opens three
 * data files of its own in argv[2], which get descriptors 0, 1 and 2.
 * Exits 3 when a data file holds anything but what the program wrote. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mark.h"

void *kept[4 * 100];

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *names[] = {"a.dat", "b.dat", "c.dat"};
    char paths[3][4096];
    for (int i = 0; i < 3; i++) snprintf(paths[i], sizeof paths[i], "%s/%s", argv[2], names[i]);
    const char line[] = "the program's own data\n";
    for (int epoch = 0; epoch < 4; epoch++) {
        for (int i = 0; i < 100; i++) memset(kept[epoch * 100 + i] = malloc(512), 1, 16);
        if (epoch == 1) {
            unlink(argv[1]);
            for (int fd = 0; fd < 1024; fd++) close(fd);
            for (int i = 0; i < 3; i++)
                if (open(paths[i], O_WRONLY | O_CREAT | O_TRUNC, 0644) != i) return 2;
        }
        mark_epoch(epoch);
        if (epoch >= 1)
            for (int fd = 0; fd < 3; fd++)
                if (write(fd, line, sizeof line - 1) != (ssize_t)(sizeof line - 1)) return 2;
    }
    for (int fd = 0; fd < 3; fd++) close(fd);
    for (int i = 0; i < 3; i++) {
        char buffer[4096];
        int in = open(paths[i], O_RDONLY);
        ssize_t length = read(in, buffer, sizeof buffer);
        close(in);
        if (length != 3 * (ssize_t)(sizeof line - 1)) return 3;
        for (int n = 0; n < 3; n++)
            if (memcmp(buffer + n * (sizeof line - 1), line, sizeof line - 1) != 0) return 3;
    }
    return 0;
}
