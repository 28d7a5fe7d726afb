// operator new / new[] / delete through libstdc++: what stays live is seen
// with the requested sizes.
#include <string>
#include <vector>
struct Node { long v[5]; Node *next; };
Node *head;
int *numbers;
std::vector<double> *series;
int main() {
    for (int i = 0; i < 10; i++) { Node *n = new Node(); n->next = head; head = n; }
    numbers = new int[100];
    delete new int[50];
    series = new std::vector<double>(300, 1.5);
    return 0;
}
