//! Promotion and demotion of learned allowlist entries.
