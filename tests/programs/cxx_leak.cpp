// A C++ program whose leak goes through operator new; new[]/delete[] and
// containers are exercised alongside and must balance.
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>
extern "C" {
#include "mark.h"
}

struct Node {
    char payload[480];
    Node *next;
};

Node *leaked_list;
std::map<int, std::string> *lookup_table;

__attribute__((noinline)) void leak_nodes() {
    for (int i = 0; i < 200; i++) {
        Node *node = new Node;
        std::memset(node->payload, 1, sizeof node->payload);
        node->next = leaked_list;
        leaked_list = node;
    }
}

__attribute__((noinline)) void balanced_work() {
    std::vector<std::unique_ptr<std::string>> strings;
    for (int i = 0; i < 500; i++) strings.push_back(std::make_unique<std::string>(100 + i % 50, 'x'));
    char *array = new char[10000];
    array[0] = 1;
    delete[] array;
}

int main() {
    lookup_table = new std::map<int, std::string>;
    for (int epoch = 0; epoch < 8; epoch++) {
        if (epoch == 0)
            for (int i = 0; i < 100; i++) (*lookup_table)[i] = std::string(200, 'y');
        balanced_work();
        leak_nodes();
        mark_epoch(epoch);
    }
    std::printf("cxx_leak: done\n");
    return 0;
}
