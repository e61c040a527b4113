// The translation unit that compiles the tests' shared precompiled header (suites/CMakeLists.txt,
// mla_test_pch); it has no code of its own.
