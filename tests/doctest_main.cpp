// The single doctest runner shared by every tests/unit/*.cpp executable.
// Unit test files must not define DOCTEST_CONFIG_IMPLEMENT*; they just
// #include <doctest/doctest.h> and write TEST_CASEs.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
