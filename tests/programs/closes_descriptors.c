/* Closes every descriptor above stderr after its second epoch, as a daemon
 * or a careful launcher does, then writes a file of its own, which gets the
 * lowest free descriptor: the one the tracer had. Exits 3 when the file
 * holds anything but what the program wrote.
 *
 * Given a second path (the trace file), deletes it just before closing the
 * descriptors: the file system may then give the program's file the
 * deleted trace's inode, once the last descriptor on it is closed. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mark.h"

void *leaked[64 * 200];
int leaked_count;

__attribute__((noinline)) void leak_per_epoch(void) {
    for (int i = 0; i < 200; i++) {
        leaked[leaked_count] = malloc(1000 + i);
        memset(leaked[leaked_count++], 1, 16);
    }
}

int main(int argc, char **argv) {
    const char *path = argv[1];
    const char line[] = "the program's own line\n";
    int own = -1, lines = 0;
    for (int epoch = 0; epoch < 8; epoch++) {
        leak_per_epoch();
        mark_epoch(epoch);
        if (epoch == 1) {
            if (argc > 2) unlink(argv[2]);
            for (int fd = 3; fd < 1024; fd++) close(fd);
            own = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        }
        if (own >= 0) {
            if (write(own, line, sizeof line - 1) != (ssize_t)(sizeof line - 1)) return 2;
            lines++;
        }
    }
    close(own);
    char buffer[4096];
    int in = open(path, O_RDONLY);
    ssize_t length = read(in, buffer, sizeof buffer);
    close(in);
    if (length != lines * (ssize_t)(sizeof line - 1)) return 3;
    for (int i = 0; i < lines; i++)
        if (memcmp(buffer + i * (sizeof line - 1), line, sizeof line - 1) != 0) return 3;
    return 0;
}
