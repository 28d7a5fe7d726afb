// Standard containers whose blocks `top --by type` names from libstdc++'s
// frames; everything stays live for the dump at exit.
#include <vector>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <cstdio>
#include <cstdlib>
struct Point { double x, y, z; };
struct Node { int v; std::shared_ptr<Node> next; };
int main() {
    std::vector<Point> pts;
    for (int i = 0; i < 1000; i++) pts.push_back(Point{1.0 * i, 2, 3});
    std::map<std::string, int> m;
    for (int i = 0; i < 300; i++) m["key number " + std::to_string(i) + " padding padding"] = i;
    std::unordered_map<int, Point> um;
    for (int i = 0; i < 300; i++) um[i] = Point{0, 0, 0};
    auto n = std::make_shared<Node>();
    for (int i = 0; i < 100; i++) { auto k = std::make_shared<Node>(); k->next = n; n = k; }
    auto u = std::make_unique<Point>();
    Point *raw = new Point{1, 2, 3};
    printf("%zu %zu %zu %d %p %p\n", pts.size(), m.size(), um.size(), n->v, (void*)u.get(), (void*)raw);
    exit(0);
}
