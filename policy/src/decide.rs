//! The decision engine: `decide(request, snapshot, now) -> Decision`, DESIGN.md precedence.
