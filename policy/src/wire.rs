//! Wire types shared by hook and daemon (versioned, serde).
