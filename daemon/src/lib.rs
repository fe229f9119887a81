//! cmdgate-daemon: the routing daemon `cmdgated` and the operator CLI `cmdgate`.
