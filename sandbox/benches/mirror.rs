//! Benchmark of the container mirror (filled in below).
fn main() {}
