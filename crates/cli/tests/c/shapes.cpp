// Polymorphic objects made with a plain `new`: 200 circles and 100
// squares held from a global array, and one circle lost. Their first word
// is the vtable pointer, which names their class.
struct Shape {
    virtual ~Shape() {}
    virtual double area() const = 0;
};
struct Circle : Shape {
    double r;
    explicit Circle(double r) : r(r) {}
    double area() const override { return 3.14159 * r * r; }
};
struct Square : Shape {
    double s;
    explicit Square(double s) : s(s) {}
    double area() const override { return s * s; }
};
Shape *shapes[300];
int main() {
    for (int i = 0; i < 300; i++) shapes[i] = i % 3 ? static_cast<Shape *>(new Circle(i)) : static_cast<Shape *>(new Square(i));
    Shape *lost = new Circle(1);
    lost = nullptr;
    return lost != nullptr;
}
