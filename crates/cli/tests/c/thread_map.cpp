// A std::thread fills an unordered_map and leaks it, then ends; main joins
// it. valgrind: the map's object definitely lost, its nodes and buckets
// indirectly lost (the ended thread's cached stack is not a root).
#include <string>
#include <thread>
#include <unordered_map>
int main() {
    std::thread t([] {
        auto *m = new std::unordered_map<int, std::string>;
        for (int i = 0; i < 50; i++) (*m)[i] = std::string(40, 'a' + i % 26);
        m = nullptr;
    });
    t.join();
    return 0;
}
