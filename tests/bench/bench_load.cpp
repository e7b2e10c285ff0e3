// being written this session
int main() { return 0; }
