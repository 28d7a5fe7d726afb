// A shared library's classes, hidden from its dynamic symbols as libraries
// built with -fvisibility=hidden keep them: only the factory is exported.
// Built stripped, its objects are named by their RTTI alone.
namespace plug {
struct __attribute__((visibility("hidden"))) Widget {
    virtual ~Widget();
    virtual int size() const;
    long w = 1, h = 2;
};
Widget::~Widget() {}
int Widget::size() const { return int(w * h); }
}  // namespace plug
extern "C" __attribute__((visibility("default"))) void *make_widget() { return new plug::Widget; }
