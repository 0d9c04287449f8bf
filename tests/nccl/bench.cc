// tests/nccl/bench.cc — placeholder replaced below.
#include <cstdio>
int run_bench(int, char**) { std::printf("FAIL bench not built\n"); return 2; }
