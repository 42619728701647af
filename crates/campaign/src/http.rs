//! The executor's health, readiness and version requests to the server it launched, on this machine
//! or on a Slurm job's head node, sent with bench's HTTP client.
//!
//! Why bench's client and not one of the campaign's own: the workspace speaks HTTP/1.1 through one
//! client (bench's own HTTP/1.1 reader in `conn.rs`, with its connect limit, body cap and redaction), so a framing bug
//! is fixed once. The executor's checks run on plain threads, so each request runs on a small
//! current-thread runtime of its own; the body is collected as bytes and decoded once it is whole,
//! so a chunk boundary inside a multibyte character is harmless.

use std::time::Duration;

use servetune_bench::client::{HttpClient, SimpleError};
use servetune_bench::spec::Limits;

/// Where a launched server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// A name or address (127.0.0.1 for the local executor, the head node's address for Slurm).
    pub host: String,
    /// The TCP port.
    pub port: u16,
}

impl Endpoint {
    /// This machine's loopback.
    pub fn local(port: u16) -> Self {
        Self { host: "127.0.0.1".into(), port }
    }

    /// The base URL (`http://host:port`), IPv6 literals bracketed.
    pub fn url(&self) -> String {
        if self.host.contains(':') {
            format!("http://[{}]:{}", self.host, self.port)
        } else {
            format!("http://{}:{}", self.host, self.port)
        }
    }
}

/// A response: status and body.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The body, decoded as UTF-8 once it is complete (an invalid sequence becomes U+FFFD).
    pub body: String,
}

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HttpError {
    /// No connection (no address, refused, unreachable).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The whole exchange did not finish within the caller's time limit.
    #[error("no complete answer in time: {0}")]
    TimedOut(String),
    /// The connection broke, the bytes are not an HTTP/1.x response, or the body is over bench's cap.
    #[error("{0}")]
    Failed(String),
}

impl From<SimpleError> for HttpError {
    fn from(e: SimpleError) -> Self {
        match e {
            SimpleError::Connect(m) => HttpError::Connect(m),
            SimpleError::Timeout(m) => HttpError::TimedOut(m),
            SimpleError::Other(m) => HttpError::Failed(m),
        }
    }
}

/// GET `path` from `ep`; `timeout` bounds the whole exchange (connect, send, every read).
pub fn get(ep: &Endpoint, path: &str, timeout: Duration) -> Result<Response, HttpError> {
    request(ep, http::Method::GET, path, bytes::Bytes::new(), timeout)
}

/// POST a JSON `body` to `path` on `ep`; `timeout` bounds the whole exchange.
pub fn post_json(ep: &Endpoint, path: &str, body: &str, timeout: Duration) -> Result<Response, HttpError> {
    request(ep, http::Method::POST, path, bytes::Bytes::from(body.to_string()), timeout)
}

fn request(ep: &Endpoint, method: http::Method, path: &str, body: bytes::Bytes, timeout: Duration) -> Result<Response, HttpError> {
    request_via(ep, servetune_bench::conn::system_resolve, method, path, body, timeout)
}

/// [`request`] with host names resolved by `resolve`. The lookup is inside `timeout` (bench's
/// client bounds it by the connect limit), and the runtime is shut down without waiting for a
/// lookup still blocked in the resolver: a name the DNS never answers costs `timeout`, not the
/// resolver's own retries.
fn request_via(
    ep: &Endpoint,
    resolve: servetune_bench::conn::Resolve,
    method: http::Method,
    path: &str,
    body: bytes::Bytes,
    timeout: Duration,
) -> Result<Response, HttpError> {
    let limits = Limits { connect: timeout, first_byte: timeout, idle: timeout, request: timeout, preflight: timeout, scrape: timeout };
    let client = HttpClient::new(&ep.url(), None, limits).map_err(|e| HttpError::Connect(e.to_string()))?.with_resolver(resolve);
    let work = move || -> Result<Response, HttpError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| HttpError::Failed(format!("cannot start an I/O runtime for {}: {e}", ep.url())))?;
        let r = rt.block_on(client.simple(method, path, body, timeout));
        // Dropping the runtime would wait for its blocking threads, a stalled lookup included.
        rt.shutdown_background();
        let r = r?;
        Ok(Response { status: r.status, body: String::from_utf8_lossy(&r.body).into_owned() })
    };
    // A runtime cannot block inside another one: a caller on an async thread gets a plain thread.
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| s.spawn(work).join().unwrap_or_else(|_| Err(HttpError::Failed("the request thread panicked".into()))))
    } else {
        work()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// Serves `reply` to one connection, written in the given pieces with a flush between them,
    /// after reading the request's head.
    fn serve_once(pieces: Vec<Vec<u8>>) -> (u16, std::thread::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let h = std::thread::spawn(move || {
            let Ok((mut c, _)) = l.accept() else { return };
            let _ = c.set_nodelay(true);
            let mut head = Vec::new();
            let mut b = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut b) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&b[..n]),
                }
            }
            for p in pieces {
                if c.write_all(&p).and_then(|()| c.flush()).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        (port, h)
    }

    #[test]
    fn a_chunked_readiness_reply_split_inside_a_multibyte_character_does_not_panic() {
        // "é" is C3 A9: the first chunk ends after C3, the second starts with A9, and each chunk
        // is written (and read) on its own.
        let pieces = vec![
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            b"4\r\n{\"a\xc3\r\n".to_vec(),
            b"4\r\n\xa9\":1\r\n".to_vec(),
            b"1\r\n}\r\n0\r\n\r\n".to_vec(),
        ];
        let (port, server) = serve_once(pieces);
        let r = get(&Endpoint::local(port), "/health", Duration::from_secs(10)).expect("chunked reply");
        server.join().expect("server");
        assert_eq!((r.status, r.body.as_str()), (200, "{\"a\u{e9}\":1}"));
    }

    #[test]
    fn a_server_that_never_answers_is_a_timeout_not_a_hang() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let held = std::thread::spawn(move || l.accept().map(|(c, _)| c));
        let e = get(&Endpoint::local(port), "/health", Duration::from_millis(300)).expect_err("silent server");
        assert!(matches!(e, HttpError::TimedOut(_)), "{e:?}");
        drop(held.join());
    }

    #[test]
    fn a_post_carries_its_json_body() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().expect("accept");
            let mut got = Vec::new();
            let mut b = [0u8; 1024];
            while !String::from_utf8_lossy(&got).ends_with("{\"x\":1}") {
                let n = c.read(&mut b).expect("read");
                assert!(n > 0, "the request ended early: {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&b[..n]);
            }
            c.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok").expect("write");
            String::from_utf8_lossy(&got).into_owned()
        });
        let r = post_json(&Endpoint::local(port), "/v1/completions", "{\"x\":1}", Duration::from_secs(10)).expect("post");
        let req = server.join().expect("server");
        assert!(req.starts_with("POST /v1/completions HTTP/1.1\r\n"), "{req}");
        assert_eq!((r.status, r.body.as_str()), (201, "ok"));
    }

    /// A resolver that never answers in time (a DNS server that drops the query).
    fn stalled_resolver(_: &str, _: u16) -> std::io::Result<Vec<std::net::SocketAddr>> {
        std::thread::sleep(Duration::from_secs(20));
        Err(std::io::Error::other("the stalled resolver gave up"))
    }

    #[test]
    fn a_host_name_lookup_that_stalls_ends_at_the_requests_deadline() {
        let ep = Endpoint { host: "head-node.cluster.example".into(), port: 8000 };
        let t0 = std::time::Instant::now();
        let e = request_via(&ep, stalled_resolver, http::Method::GET, "/health", bytes::Bytes::new(), Duration::from_millis(300))
            .expect_err("the lookup never answers");
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(3), "the request was held {took:?} by a lookup past its 300 ms deadline");
        assert!(matches!(&e, HttpError::TimedOut(m) if m.contains("head-node.cluster.example")), "{e:?}");
    }

    #[test]
    fn a_health_body_larger_than_the_cap_is_refused_not_held() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let server = std::thread::spawn(move || {
            let Ok((mut c, _)) = l.accept() else { return 0usize };
            let mut b = [0u8; 4096];
            let _ = c.read(&mut b);
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3000000000\r\n\r\n");
            let chunk = vec![b'x'; 1 << 20];
            // Until the client hangs up: it must stop well before the 3 GB it was promised.
            (0..3000).take_while(|_| c.write_all(&chunk).is_ok()).count()
        });
        let e = get(&Endpoint::local(port), "/health", Duration::from_secs(20)).expect_err("over the cap");
        assert!(matches!(&e, HttpError::Failed(m) if m.contains("the body is longer than 16777216 bytes")), "{e:?}");
        let sent_mib = server.join().expect("server");
        assert!(sent_mib < 100, "the client read {sent_mib} MiB of a body capped at 16 MiB");
    }

    #[test]
    fn a_closed_port_is_a_connect_error() {
        let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let e = get(&Endpoint::local(port), "/health", Duration::from_secs(5)).expect_err("closed");
        assert!(matches!(e, HttpError::Connect(_)), "{e:?}");
    }
}
