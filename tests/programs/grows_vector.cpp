/* A history kept in a std::vector, 128 Ki values (1 MiB) appended every
 * epoch for 14 epochs: the vector doubles its buffer at a few epochs only,
 * one block alive (its newest copy), while the RSS rises at every epoch as
 * the buffer is filled. */
#include <cstdio>
#include <vector>
#include "mark.h"

static std::vector<long> history;

__attribute__((noinline)) static void record_history(int epoch) {
    for (long i = 0; i < 131072; i++) {
        history.push_back(i + epoch); /* the growing line */
    }
}

int main() {
    for (int epoch = 0; epoch < 14; epoch++) {
        record_history(epoch);
        mark_epoch(epoch);
    }
    std::printf("grows_vector: %zu values\n", history.size());
    return 0;
}
