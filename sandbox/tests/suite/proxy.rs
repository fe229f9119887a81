//! Network by domain, the mirror's side (`cmdgate_sandbox::net`): a proxy run keeps its own
//! network namespace with only loopback; its one way out is the listener made inside that
//! namespace and handed to the caller. Every other connect is refused and reported.

use crate::common::Env;
use crate::mirror::{command, mirrored_with};
use cmdgate_sandbox::mirror;
use cmdgate_sandbox::Effect;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};

#[test]
fn the_listener_is_the_only_way_out_and_direct_connects_are_refused() {
    let env = Env::new();
    // A host listener on loopback: what a command must not reach directly.
    let host = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    host.set_nonblocking(true).expect("nonblocking");
    let host_port = host.local_addr().expect("addr").port();
    let mut config = env.config();
    config.proxy = true;
    let cmd = command(
        &env,
        &format!(
            "echo \"proxy=$HTTPS_PROXY,$http_proxy,no=[$NO_PROXY]\"; \
             p=${{HTTPS_PROXY##*:}}; \
             exec 3<>/dev/tcp/127.0.0.1/$p || exit 9; \
             printf 'CONNECT registry.test:443 HTTP/1.1\\r\\n\\r\\n' >&3; \
             read -r line <&3; echo \"got: $line\"; \
             (exec 4<>/dev/tcp/127.0.0.1/{host_port}) 2>/dev/null && echo reached-host; \
             (exec 4<>/dev/tcp/1.1.1.1/443) 2>/dev/null && echo reached-internet; \
             echo done"
        ),
    );
    let mut run = mirror::start(&config, &cmd).expect("start");
    let handoff = run.take_proxy().expect("a proxy run has a hand-off");
    let listener = handoff.receive().expect("the listener arrives");
    let port = listener.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().expect("accept");
        let mut head = String::new();
        BufReader::new(&mut conn)
            .read_line(&mut head)
            .expect("head");
        conn.write_all(b"HTTP/1.1 403 refused by the test\r\n\r\n")
            .expect("answer");
        head
    });
    let mut out = run.take_stdout().expect("stdout");
    let mut stdout = String::new();
    out.read_to_string(&mut stdout).expect("stdout");
    let fin = run.wait().expect("wait");
    let head = server.join().expect("server");
    assert_eq!(head, "CONNECT registry.test:443 HTTP/1.1\r\n");
    let url = format!("http://127.0.0.1:{port}");
    assert!(
        stdout.contains(&format!("proxy={url},{url},no=[]")),
        "{stdout}"
    );
    assert!(
        stdout.contains("got: HTTP/1.1 403 refused by the test"),
        "{stdout}"
    );
    assert!(!stdout.contains("reached"), "{stdout}");
    assert!(stdout.contains("done"), "{stdout}");
    assert_eq!(
        host.accept().map(drop).map_err(|e| e.kind()),
        Err(ErrorKind::WouldBlock),
        "the host listener was reached"
    );
    for target in [
        format!("inet 127.0.0.1:{host_port}"),
        "inet 1.1.1.1:443".to_owned(),
    ] {
        assert!(
            fin.run.effects.iter().any(|e| matches!(e,
                Effect::Network { target: t, allowed: false } if *t == target)),
            "{target}: {:?}",
            fin.run.effects
        );
    }
    assert!(
        !fin.run.effects.iter().any(|e| matches!(e,
            Effect::Network { target, .. } if target.ends_with(&format!(":{port}")))),
        "the proxy connect itself is not an effect: {:?}",
        fin.run.effects
    );
    assert!(!fin.run.clean, "a refused direct connect is dirty");
}

#[test]
fn without_a_listener_taker_the_run_still_ends_and_udp_is_refused() {
    let env = Env::new();
    let mut config = env.config();
    config.proxy = true;
    let cmd = command(
        &env,
        "(echo x > /dev/udp/8.8.8.8/53) 2>/dev/null && echo sent; \
         getent hosts example.com >/dev/null && echo resolved; echo end",
    );
    let (out, _err, fin) = mirrored_with(&config, &cmd);
    assert_eq!(out, "end\n", "{:?}", fin.run.effects);
    assert!(
        fin.run.effects.iter().any(|e| matches!(e,
            Effect::Network { target, allowed: false } if target.contains("8.8.8.8:53"))),
        "{:?}",
        fin.run.effects
    );
}

#[test]
fn proxy_and_network_together_are_refused() {
    let env = Env::new();
    let mut config = env.config();
    config.proxy = true;
    config.network = true;
    assert!(mirror::start(&config, &command(&env, "true")).is_err());
}
