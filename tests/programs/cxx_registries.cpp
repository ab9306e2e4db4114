// Two registries that grow without bound, each through std::map's node
// allocation. Built without debug information, the standard library's
// templates compiled into the program (std::_Rb_tree's insertion, at -O2
// a clone of it) must not stand for either leak: each is its own line.
#include <cstdio>
#include <map>
#include <string>
extern "C" {
#include "mark.h"
}

std::map<int, std::string> users, sessions;
int next_id;

__attribute__((noinline)) void register_user() { users[next_id++] = "user"; }
__attribute__((noinline)) void register_session() { sessions[next_id++] = "session"; }

int main() {
    for (int epoch = 0; epoch < 10; epoch++) {
        for (int i = 0; i < 600; i++) register_user();
        for (int i = 0; i < 200; i++) register_session();
        mark_epoch(epoch);
    }
    std::printf("cxx_registries: %zu users, %zu sessions\n", users.size(), sessions.size());
}
