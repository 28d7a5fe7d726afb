// Polymorphic objects made with a plain `new` at -O1: 1,333 circles and
// 667 squares of namespace geo, held from a global array. Their first word
// is the vtable pointer: the symbol table names their class when there is
// one, the RTTI the vtable points to when the program is stripped (and
// nothing when it was built with -fno-rtti as well).
#include <stdio.h>
namespace geo {
struct Shape {
    virtual ~Shape();
    virtual double area() const = 0;
};
Shape::~Shape() {}
struct Circle : Shape {
    double r;
    explicit Circle(double r) : r(r) {}
    double area() const override;
};
double Circle::area() const { return 3.14159 * r * r; }
struct Square : Shape {
    double s, angle;
    explicit Square(double s) : s(s), angle(0) {}
    double area() const override;
};
double Square::area() const { return s * s; }
}  // namespace geo

geo::Shape *shapes[2000];

int main() {
    for (int i = 0; i < 2000; i++)
        shapes[i] = i % 3 == 0 ? static_cast<geo::Shape *>(new geo::Square(i)) : static_cast<geo::Shape *>(new geo::Circle(i));
    double total = 0;
    for (geo::Shape *s : shapes) total += s->area();
    printf("area %.0f\n", total);
    return 0;
}
