//! The circuit breaker state machine: sliding-window counts, weights, open / half-open / closed.
