void entry(void);
void tiny_exported(void);
int main(void) { tiny_exported(); entry(); return 0; }
