//! cmdgate-tests: end-to-end tests that drive the real binaries. Helpers live here; the tests are
//! under `tests/tests/`.
