//! cmdgate-sandbox: test-run a command in a container mirror of the workspace (overlayfs +
//! namespaces + cgroup limits), report its effects, and roll the mirror back.
