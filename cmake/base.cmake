# base: error records, logging, the qtype table. Everything links it.
memra_area(base SOURCES runtime/err.c runtime/qtype.c TESTS tests/test_base.c)
