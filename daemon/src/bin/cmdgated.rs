//! cmdgated: the routing daemon.

fn main() -> anyhow::Result<()> {
    anyhow::bail!("cmdgated: the daemon is not built yet (see issue 5); nothing is served")
}
