// Multiple and virtual inheritance. 400 `Sprite`s (two polymorphic bases:
// their second base's subobject starts with a secondary vtable, offset to
// top -16), 100 `Pen`s (derived from that second base alone), 150
// `Diamond`s (a virtual base shared by two bases), and 200 blocks copied
// from a sprite's second subobject: their first word points into a
// secondary vtable, so they are the interior of some sprite, not objects
// of a class of their own (nor `Drawable`s, nor `Sprite`s). And 150 blocks
// whose first word only looks like a vtable pointer: into a vtable past
// its address point, at a type_info object, at a string in .rodata.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <typeinfo>
struct Named {
    virtual ~Named();
    virtual const char *name() const { return "named"; }
    long id = 1;
};
Named::~Named() {}
struct Drawable {
    virtual ~Drawable();
    virtual int draw() const { return 1; }
    long layer = 2;
};
Drawable::~Drawable() {}
struct Sprite : Named, Drawable {
    int draw() const override;
    long frame = 3;
};
int Sprite::draw() const { return 4; }
struct Pen : Drawable {
    int draw() const override;
    long ink = 5;
};
int Pen::draw() const { return 6; }
struct Base {
    virtual ~Base();
    long base = 7;
};
Base::~Base() {}
struct Left : virtual Base {
    long left = 8;
};
struct Right : virtual Base {
    long right = 9;
};
struct Diamond : Left, Right {
    ~Diamond() override;
    long diamond = 10;
};
Diamond::~Diamond() {}

void *held[1000];

int main() {
    int n = 0;
    Sprite *first = nullptr;
    for (int i = 0; i < 400; i++) {
        Sprite *s = new Sprite;
        if (!first) first = s;
        held[n++] = s;
    }
    for (int i = 0; i < 100; i++) held[n++] = new Pen;
    for (int i = 0; i < 150; i++) held[n++] = new Diamond;
    for (int i = 0; i < 200; i++) {
        Drawable *inner = first;  // the sprite's second subobject
        void *copy = malloc(sizeof(Drawable));
        memcpy(copy, (const void *)inner, sizeof(Drawable));
        held[n++] = copy;
    }
    void *const *vptr = *(void *const *const *)(const Named *)first;
    for (int i = 0; i < 150; i++) {
        void **b = (void **)calloc(2, sizeof(void *));
        b[0] = i < 50 ? (void *)(vptr + 1) : i < 100 ? (void *)&typeid(Sprite) : (void *)"a string in .rodata";
        held[n++] = b;
    }
    printf("held %d\n", n);
    return 0;
}
