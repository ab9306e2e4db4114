// A C++ program whose leaks go through operator new: plain objects, and
// over-aligned objects beside nothrow arrays. Every one of the twenty
// operators runs each epoch and balances, new[]/delete[] and containers
// too; a new too large to satisfy must throw std::bad_alloc to the program.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>
extern "C" {
#include "mark.h"
}

struct Node {
    char payload[480];
    Node *next;
};

struct alignas(64) Aligned {
    char bytes[1024];
};

Node *leaked_list;
std::map<int, std::string> *lookup_table;
void *leaked_aligned[8 * 16 * 2];
int leaked_aligned_count;

// Keeps the compiler from pairing a new with its delete and dropping both.
template <class T> T *opaque(T *pointer) {
    asm volatile("" : "+r"(pointer)::"memory");
    return pointer;
}

__attribute__((noinline)) void leak_nodes() {
    for (int i = 0; i < 200; i++) {
        Node *node = new Node;
        std::memset(node->payload, 1, sizeof node->payload);
        node->next = leaked_list;
        leaked_list = node;
    }
}

// 16 x (1024 + 1000) bytes an epoch, at two lines.
__attribute__((noinline)) void leak_aligned() {
    for (int i = 0; i < 16; i++) {
        leaked_aligned[leaked_aligned_count++] = opaque(new Aligned);
        leaked_aligned[leaked_aligned_count++] = opaque(new (std::nothrow) char[1000]);
    }
}

__attribute__((noinline)) void balanced_work() {
    std::vector<std::unique_ptr<std::string>> strings;
    for (int i = 0; i < 500; i++) strings.push_back(std::make_unique<std::string>(100 + i % 50, 'x'));
    char *array = new char[10000];
    array[0] = 1;
    delete[] array;
}

__attribute__((noinline)) void every_operator_balanced() {
    const std::align_val_t al{64};
    ::operator delete(opaque(::operator new(100)));
    ::operator delete[](opaque(::operator new[](100)));
    ::operator delete(opaque(::operator new(100, std::nothrow)), std::nothrow);
    ::operator delete[](opaque(::operator new[](100, std::nothrow)), std::nothrow);
    ::operator delete(opaque(::operator new(100, al)), al);
    ::operator delete[](opaque(::operator new[](100, al)), al);
    ::operator delete(opaque(::operator new(100, al, std::nothrow)), al, std::nothrow);
    ::operator delete[](opaque(::operator new[](100, al, std::nothrow)), al, std::nothrow);
    ::operator delete(opaque(::operator new(100)), 100);
    ::operator delete[](opaque(::operator new[](100)), 100);
    ::operator delete(opaque(::operator new(100, al)), 100, al);
    ::operator delete[](opaque(::operator new[](100, al)), 100, al);
}

int main() {
    try {
        volatile std::size_t huge = SIZE_MAX / 4;
        opaque(new char[huge]);
        std::printf("cxx_leak: no bad_alloc\n");
    } catch (const std::bad_alloc &) {
        std::printf("cxx_leak: bad_alloc caught\n");
    }
    lookup_table = new std::map<int, std::string>;
    for (int epoch = 0; epoch < 8; epoch++) {
        if (epoch == 0)
            for (int i = 0; i < 100; i++) (*lookup_table)[i] = std::string(200, 'y');
        balanced_work();
        every_operator_balanced();
        leak_nodes();
        leak_aligned();
        mark_epoch(epoch);
    }
    std::printf("cxx_leak: done\n");
    return 0;
}
