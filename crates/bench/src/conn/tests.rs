//! Tests of the HTTP/1.1 client: framing, reuse, timing of reads, limits.
use super::*;
use crate::api::Api;
use crate::client::{Exec, HttpClient};
use crate::record::{ErrorKind, RequestRecord};
use crate::spec::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Reads one request head (these tests send bodies only with a content-length the server
/// skips over); false when the client closed.
async fn read_head(s: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
            let len: usize = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
            let mut have = buf.len() - i - 4;
            while have < len {
                match s.read(&mut b).await {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => have += n,
                }
            }
            return true;
        }
        match s.read(&mut b).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
}

/// A server answering every request on a connection with `reply`, up to `per_conn` answers,
/// then closing it (or, `hold`, keeping it open until the client closes); returns its URL.
async fn server(reply: &'static [u8], per_conn: usize, hold: bool) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                for _ in 0..per_conn {
                    if !read_head(&mut s).await || s.write_all(reply).await.is_err() {
                        return;
                    }
                }
                if hold {
                    let _ = read_head(&mut s).await;
                }
            });
        }
    });
    url
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// A resolver that answers far too late (a DNS server dropping queries). The test's runtime
/// waits for it when the test ends, so it is kept short.
fn stalled_resolver(_: &str, _: u16) -> std::io::Result<Vec<SocketAddr>> {
    std::thread::sleep(Duration::from_secs(3));
    Err(std::io::Error::other("the stalled resolver gave up"))
}

/// A resolver that maps every name to loopback (as /etc/hosts would).
fn loopback_resolver(_: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
}

#[tokio::test]
async fn a_host_name_lookup_is_inside_the_connect_limit() {
    let limits = Limits { connect: Duration::from_millis(200), ..Limits::default() };
    let c = HttpClient::new("http://never-answers.example:8000", None, limits).expect("client").with_resolver(stalled_resolver);
    let t0 = Instant::now();
    let e = c.simple(Method::GET, "/health", Bytes::new(), Duration::from_secs(10)).await.expect_err("no address in time");
    assert!(t0.elapsed() < Duration::from_secs(2), "held {:?} by a stalled lookup", t0.elapsed());
    let msg = format!("{e:?}");
    assert!(msg.contains("the host name never-answers.example did not resolve within 0.2 s (--connect-timeout)"), "{msg}");
}

#[tokio::test]
async fn a_resolved_host_name_is_connected_to() {
    let url = server(OK, usize::MAX, false).await;
    let port = url.rsplit(':').next().expect("port");
    let c = HttpClient::new(&format!("http://server.example:{port}"), None, Limits::default())
        .expect("client")
        .with_resolver(loopback_resolver);
    let r = c.simple(Method::GET, "/x", Bytes::new(), Duration::from_secs(10)).await.expect("answer");
    assert_eq!((r.status, &r.body[..]), (200, &b"ok"[..]));
}

#[tokio::test]
async fn sequential_requests_share_one_kept_alive_connection() {
    let url = server(OK, usize::MAX, false).await;
    let c = HttpClient::new(&url, None, Limits::default()).expect("client");
    for _ in 0..5 {
        let r = c.simple(Method::GET, "/x", Bytes::new(), Duration::from_secs(10)).await.expect("answer");
        assert_eq!((r.status, &r.body[..]), (200, &b"ok"[..]));
    }
    assert_eq!(c.connections_opened(), 1);
}

#[tokio::test]
async fn a_kept_alive_connection_the_server_closed_is_replaced_not_failed() {
    // One answer per connection, then the server closes it: each request after the first
    // finds its pooled connection closed and must go out on a new one.
    let url = server(OK, 1, false).await;
    let c = HttpClient::new(&url, None, Limits::default()).expect("client");
    for _ in 0..3 {
        let r = c.simple(Method::GET, "/x", Bytes::new(), Duration::from_secs(10)).await.expect("answer");
        assert_eq!(r.status, 200);
        // Let the close reach the client, as between two requests of a real run.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.connections_opened(), 3);
}

fn record() -> RequestRecord {
    RequestRecord::new(0, false, 0, 4, 8)
}

async fn execute(url: &str, limits: Limits) -> RequestRecord {
    let c = HttpClient::new(url, None, limits).expect("client");
    let counter = AtomicU64::new(0);
    let x = Exec { api: Api::OpenaiCompletions, stream: true, t0: Instant::now(), tokenizer: None, tokens_counter: &counter };
    let mut rec = record();
    c.execute(&x, Bytes::from_static(b"{}"), &mut rec).await;
    assert_eq!(counter.load(Ordering::Relaxed), rec.output_tokens_chunks, "the live count gets every token");
    rec
}

const THREE_IN_ONE_WRITE: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 198\r\n\r\n\
data: {\"choices\":[{\"text\":\" a\"}]}\n\n\
data: {\"choices\":[{\"text\":\" b\"}]}\n\n\
data: {\"choices\":[{\"text\":\" c\",\"finish_reason\":\"length\"}]}\n\n\
data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";

#[tokio::test]
async fn chunks_that_arrived_in_one_read_carry_that_read_time() {
    let url = server(THREE_IN_ONE_WRITE, 1, false).await;
    let rec = execute(&url, Limits::default()).await;
    assert!(rec.ok(), "{:?}", rec.error_detail);
    assert_eq!(rec.chunks.len(), 3);
    // Parsed one after another, but timed by the one read that brought them all.
    assert!(rec.chunks.iter().all(|c| c.at_ns == rec.chunks[0].at_ns), "{:?}", rec.chunks);
    assert!(rec.chunks[0].at_ns >= rec.actual_ns && rec.chunks[0].at_ns <= rec.end_ns);
}

#[tokio::test]
async fn a_stream_that_goes_silent_after_its_first_event_is_stalled() {
    let head: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n\
23\r\ndata: {\"choices\":[{\"text\":\" a\"}]}\n\n\r\n";
    let url = server(head, 1, true).await;
    let limits = Limits { idle: Duration::from_millis(100), ..Limits::default() };
    let rec = execute(&url, limits).await;
    assert_eq!(rec.error, Some(ErrorKind::Stalled), "{:?}", rec.error_detail);
    assert_eq!(rec.chunks.len(), 1);
}

/// An SSE response in chunked coding, one HTTP chunk per event (the first with an extension),
/// ending with a trailer.
fn chunked_sse(events: &[&str]) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for (i, e) in events.iter().enumerate() {
        let ext = if i == 0 { ";name=value" } else { "" };
        out.extend_from_slice(format!("{:x}{ext}\r\ndata: {e}\n\n\r\n", e.len() + 8).as_bytes());
    }
    out.extend_from_slice(b"0\r\nx-trailer: 1\r\n\r\n");
    out
}

const EVENTS: &[&str] = &[
    r#"{"choices":[{"text":" a"}]}"#,
    r#"{"choices":[{"text":" b","finish_reason":"length"}]}"#,
    r#"{"choices":[],"usage":{"completion_tokens":2}}"#,
    "[DONE]",
];

/// A server writing `reply` to one request a byte at a time, a millisecond apart, so the
/// client's reads split every size line, CRLF and event; then it waits for the client to close.
async fn dribbling_server(reply: Vec<u8>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    tokio::spawn(async move {
        if let Ok((mut s, _)) = l.accept().await {
            let _ = s.set_nodelay(true);
            if read_head(&mut s).await {
                for b in reply.chunks(1) {
                    if s.write_all(b).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let _ = read_head(&mut s).await;
            }
        }
    });
    url
}

#[tokio::test]
async fn a_chunked_stream_split_at_every_byte_is_read_whole() {
    let url = dribbling_server(chunked_sse(EVENTS)).await;
    let rec = execute(&url, Limits::default()).await;
    assert!(rec.ok(), "{:?}", rec.error_detail);
    assert_eq!((rec.chunks.len(), rec.output_tokens_server), (2, Some(2)));
    assert!(rec.chunks[0].at_ns < rec.chunks[1].at_ns, "each chunk carries its own read's time: {:?}", rec.chunks);
}

#[tokio::test]
async fn a_chunked_stream_in_one_write_is_read_whole_and_its_connection_reused() {
    let reply: &'static [u8] = Box::leak(chunked_sse(EVENTS).into_boxed_slice());
    let url = server(reply, usize::MAX, false).await;
    let c = HttpClient::new(&url, None, Limits::default()).expect("client");
    let counter = AtomicU64::new(0);
    let x = Exec { api: Api::OpenaiCompletions, stream: true, t0: Instant::now(), tokenizer: None, tokens_counter: &counter };
    for _ in 0..3 {
        let mut rec = record();
        c.execute(&x, Bytes::from_static(b"{}"), &mut rec).await;
        assert!(rec.ok() && rec.chunks.len() == 2, "{rec:?}");
    }
    assert_eq!(c.connections_opened(), 1, "the trailer was read to the end, so the connection went back to the pool");
}

#[tokio::test]
async fn a_stream_ended_by_the_close_is_read_to_its_end() {
    let reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n\
data: {\"choices\":[{\"text\":\" a\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
    let url = server(reply, 1, false).await;
    let rec = execute(&url, Limits::default()).await;
    assert!(rec.ok(), "{:?}", rec.error_detail);
    assert_eq!(rec.chunks.len(), 1);
}

#[tokio::test]
async fn a_broken_chunk_size_is_a_truncated_stream() {
    let reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\nzz\r\ndata: x\n\n\r\n";
    let url = server(reply, 1, true).await;
    let rec = execute(&url, Limits::default()).await;
    assert_eq!(rec.error, Some(ErrorKind::TruncatedStream), "{:?}", rec.error_detail);
    assert!(rec.error_detail.as_deref().is_some_and(|d| d.contains("not hexadecimal")), "{:?}", rec.error_detail);
}

#[tokio::test]
async fn interim_1xx_heads_are_skipped() {
    let url = server(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", usize::MAX, false).await;
    let c = HttpClient::new(&url, None, Limits::default()).expect("client");
    let r = c.simple(Method::GET, "/x", Bytes::new(), Duration::from_secs(10)).await.expect("answer");
    assert_eq!((r.status, &r.body[..]), (200, &b"ok"[..]));
}

#[tokio::test]
async fn a_response_that_says_connection_close_is_not_reused() {
    let url = server(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok", usize::MAX, false).await;
    let c = HttpClient::new(&url, None, Limits::default()).expect("client");
    for _ in 0..3 {
        let r = c.simple(Method::GET, "/x", Bytes::new(), Duration::from_secs(10)).await.expect("answer");
        assert_eq!(r.status, 200);
    }
    assert_eq!(c.connections_opened(), 3);
}

#[tokio::test]
async fn an_answer_that_is_not_http_is_a_disconnect_that_says_so() {
    let url = server(b"SSH-2.0-OpenSSH_9.6\r\n\r\n", 1, false).await;
    let rec = execute(&url, Limits::default()).await;
    assert_eq!(rec.error, Some(ErrorKind::Disconnected), "{:?}", rec.error_detail);
    assert!(rec.error_detail.as_deref().is_some_and(|d| d.contains("not an HTTP/1.x response")), "{:?}", rec.error_detail);
}

#[test]
fn response_heads_are_framed_as_rfc_9112_says() {
    let p = |h: &str| parse_head(h.as_bytes());
    let body = |h: &str| p(h).map(|x| (x.body, x.keep_alive));
    assert_eq!(body("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"), Ok((Body::Length(5), true)));
    assert_eq!(
        body("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\ncontent-length: 5\r\n\r\n"),
        Ok((Body::Chunked(Chunked::Size), true))
    );
    assert_eq!(body("HTTP/1.1 200 OK\r\n\r\n"), Ok((Body::UntilClose, false)));
    assert_eq!(body("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n"), Ok((Body::Done, false)));
    assert_eq!(body("HTTP/1.1 204 No Content\r\ncontent-length: 9\r\n\r\n"), Ok((Body::Done, true)));
    assert!(p("HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n").is_err_and(|e| e.contains("two different")));
    assert!(p("HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n").is_err_and(|e| e.contains("not a number")));
    assert_eq!(p("HTTP/1.1 200 OK\nContent-Type: Text/Event-Stream\n\n").map(|x| x.head.content_type), Ok("text/event-stream".into()));
    assert_eq!(head_end(b"HTTP/1.1 200 OK\r\na: b\r\n\r\nrest"), Some(25));
    assert_eq!(head_end(b"HTTP/1.1 200 OK\r\na: b\r\n"), None);
}
