/* Loads the C++ library named by argv[1] with dlopen(RTLD_LOCAL), as Python
 * loads an extension module, and leaks through it for 8 epochs. Exits 4 when
 * the library's new does not throw std::bad_alloc for an impossible size. */
#include <dlfcn.h>
#include <stdio.h>
#include "mark.h"

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!plugin) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    void (*leak)(void) = (void (*)(void))dlsym(plugin, "plugin_leak");
    int (*new_throws)(void) = (int (*)(void))dlsym(plugin, "plugin_new_throws");
    if (!leak || !new_throws) return 2;
    for (int epoch = 0; epoch < 8; epoch++) {
        leak();
        mark_epoch(epoch);
    }
    if (!new_throws()) return 4;
    printf("loads_cxx_plugin: bad_alloc caught\n");
    return 0;
}
