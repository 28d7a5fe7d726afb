// Holds 250 widgets the stripped library plugin_shapes.cpp made.
#include <stdio.h>
extern "C" void *make_widget();
void *widgets[250];
int main() {
    for (void *&w : widgets) w = make_widget();
    printf("widgets %zu\n", sizeof widgets / sizeof *widgets);
    return 0;
}
