//! HTTP/1.1 connections driven by the task of the request they carry, and the pool of idle ones.
//!
//! Why not a client that runs each connection in a task of its own: then every arrival costs two
//! wake-ups (the connection's task reads, then the request's task is woken to take the frame), and
//! a chunk's time is taken when the second task gets round to it, so a busy client turns its own
//! lateness into false inter-token gaps. Here the request's task polls its connection's I/O and its
//! response body in the same poll: one wake-up per arrival, and every read stamps the connection's
//! [`ReadClock`] the moment it returns bytes. A chunk's time is the read that brought it.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::{Body as _, Frame, Incoming};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// An idle connection older than this is closed rather than reused: servers close idle keep-alive
/// connections after a while (uvicorn after 5 s, most proxies after 60 s), and a request sent on
/// one the server is closing fails for no fault of the server's.
const MAX_IDLE: Duration = Duration::from_secs(4);

/// The time origin of read stamps (a stamp is an `AtomicU64` of nanoseconds since it).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// When a connection's last read returned bytes.
#[derive(Debug, Default)]
pub struct ReadClock(AtomicU64);

impl ReadClock {
    fn stamp(&self) {
        let ns = u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX);
        // 0 means "never"; a read in the epoch's first nanosecond is stamped 1 ns late.
        self.0.store(ns.max(1), Ordering::Relaxed);
    }

    /// The last read that returned bytes, if any.
    pub fn last(&self) -> Option<Instant> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            ns => epoch().checked_add(Duration::from_nanos(ns)),
        }
    }
}

/// A TCP stream that stamps its [`ReadClock`] whenever a read returns bytes.
struct Stamped {
    tcp: TcpStream,
    clock: Arc<ReadClock>,
}

impl AsyncRead for Stamped {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.clock.stamp();
        }
        r
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

type Driver = http1::Connection<TokioIo<Stamped>, Full<Bytes>>;

/// One connection: where requests are handed in, the future doing its I/O, and its read clock.
struct Conn {
    send: http1::SendRequest<Full<Bytes>>,
    io: Pin<Box<Driver>>,
    clock: Arc<ReadClock>,
}

impl Conn {
    /// Polls the I/O once without a waker: true when the connection is still open and free for a
    /// request (an idle connection whose server closed it has seen the end of its stream).
    fn usable(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        if self.io.as_mut().poll(&mut cx).is_ready() {
            return false;
        }
        self.send.is_ready()
    }
}

/// Host and port: the connections to one of them are interchangeable.
type Key = (String, u16);

struct Idle {
    conn: Conn,
    since: Instant,
}

/// Turns a host name and port into addresses. It may block (the system's resolver does), so it
/// runs on the blocking pool, and the connect limit covers it.
pub type Resolve = fn(&str, u16) -> std::io::Result<Vec<SocketAddr>>;

/// The system's resolver (`getaddrinfo`: /etc/hosts, DNS, as nsswitch.conf says).
pub fn system_resolve(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs;
    (host, port).to_socket_addrs().map(Iterator::collect)
}

/// Idle keep-alive connections by origin, taken last-in first-out.
pub struct Pool {
    idle: Mutex<HashMap<Key, Vec<Idle>>>,
    opened: AtomicU64,
    resolve: Resolve,
}

impl Default for Pool {
    fn default() -> Self {
        Self::with_resolver(system_resolve)
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("opened", &self.opened()).finish()
    }
}

/// One request, ready to be sent (again, on a fresh connection, if a reused one was closed).
#[derive(Debug, Clone)]
pub struct Target {
    key: Key,
    method: Method,
    /// Origin form: the path and query.
    path: Uri,
    host: HeaderValue,
    auth: Option<HeaderValue>,
    body: Bytes,
}

impl Target {
    /// A request for the absolute `url`; `Err` names what is wrong with the URL.
    pub fn new(method: Method, url: &str, auth: Option<HeaderValue>, body: Bytes) -> Result<Self, String> {
        let u: Uri = url.parse().map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        let host = u.host().filter(|h| !h.is_empty()).ok_or_else(|| format!("{url:?} has no host"))?;
        let port = u.port_u16().unwrap_or(80);
        let authority = u.authority().map(|a| a.as_str()).unwrap_or(host);
        // Credentials in a URL are never sent (they were stripped before); the Host header is
        // the authority without them.
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        let hostv = HeaderValue::from_str(authority).map_err(|e| format!("{url:?}: the host is not a header value: {e}"))?;
        let path = u.path_and_query().map_or("/", |p| p.as_str()).parse().map_err(|e| format!("{url:?}: {e}"))?;
        let bare = host.trim_start_matches('[').trim_end_matches(']').to_string();
        Ok(Self { key: (bare, port), method, path, host: hostv, auth, body })
    }

    fn build(&self) -> Result<Request<Full<Bytes>>, String> {
        let mut b = Request::builder().method(self.method.clone()).uri(self.path.clone()).header(header::HOST, self.host.clone());
        if !self.body.is_empty() {
            b = b.header(header::CONTENT_TYPE, "application/json");
        }
        if let Some(a) = &self.auth {
            b = b.header(header::AUTHORIZATION, a.clone());
        }
        b.body(Full::new(self.body.clone())).map_err(|e| format!("cannot build the request: {e}"))
    }
}

/// Why a request got no response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// No TCP connection could be made.
    Connect(String),
    /// The connect limit passed.
    ConnectTimeout(String),
    /// The connection closed or broke before a response head (or the request could not be built).
    Closed(String),
}

impl Pool {
    /// A pool whose host names are resolved by `resolve` (the default is [`system_resolve`]).
    pub fn with_resolver(resolve: Resolve) -> Self {
        Self { idle: Mutex::default(), opened: AtomicU64::new(0), resolve }
    }

    /// Connections opened so far (a pool that reuses them opens about as many as requests run at
    /// once).
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Sends `t` on an idle connection to its origin, or a new one, and waits for the response
    /// head while driving the connection. A reused connection that turns out closed before any
    /// answer is replaced by a new one, once. `shown` is the URL as errors print it.
    pub async fn send(&self, t: &Target, shown: &str, connect: Duration) -> Result<(Response<Incoming>, Lease<'_>), SendError> {
        let req = t.build().map_err(SendError::Closed)?;
        if let Some(conn) = self.checkout(&t.key) {
            let mut lease = Lease { pool: self, key: t.key.clone(), conn, ended: false };
            match lease.request(req).await {
                Ok(resp) => return Ok((resp, lease)),
                Err(e) if retryable(&e) => {}
                Err(e) => return Err(SendError::Closed(closed_detail(shown, &e))),
            }
        }
        let req = t.build().map_err(SendError::Closed)?;
        let conn = self.connect(&t.key, shown, connect).await?;
        let mut lease = Lease { pool: self, key: t.key.clone(), conn, ended: false };
        match lease.request(req).await {
            Ok(resp) => Ok((resp, lease)),
            Err(e) => Err(SendError::Closed(closed_detail(shown, &e))),
        }
    }

    fn checkout(&self, key: &Key) -> Option<Conn> {
        loop {
            let idle = self.idle.lock().ok()?.get_mut(key)?.pop()?;
            let mut conn = idle.conn;
            if idle.since.elapsed() < MAX_IDLE && conn.usable() {
                return Some(conn);
            }
        }
    }

    fn checkin(&self, key: Key, conn: Conn) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.entry(key).or_default().push(Idle { conn, since: Instant::now() });
        }
    }

    /// Resolves the host and opens a TCP connection, both within `limit`: a resolver that never
    /// answers (a DNS server dropping queries) is a connect timeout like a silent port. The lookup
    /// runs on the blocking pool; when the limit passes first it is left to finish on its own.
    async fn connect(&self, key: &Key, shown: &str, limit: Duration) -> Result<Conn, SendError> {
        let deadline = tokio::time::Instant::now() + limit;
        let (host, port, resolve) = (key.0.clone(), key.1, self.resolve);
        let lookup = async move {
            if let Ok(ip) = host.parse::<IpAddr>() {
                return Ok(vec![SocketAddr::new(ip, port)]);
            }
            tokio::task::spawn_blocking(move || resolve(&host, port)).await.map_err(std::io::Error::other)?
        };
        let addrs = match tokio::time::timeout_at(deadline, lookup).await {
            Err(_) => {
                return Err(SendError::ConnectTimeout(format!(
                    "cannot connect to {shown}: the host name {} did not resolve within {:.1} s (--connect-timeout); check the name and the DNS servers",
                    key.0,
                    limit.as_secs_f64()
                )))
            }
            Ok(Err(e)) => return Err(SendError::Connect(format!("cannot connect to {shown}: cannot resolve {}: {e}", key.0))),
            Ok(Ok(a)) if a.is_empty() => return Err(SendError::Connect(format!("cannot connect to {shown}: {} has no address", key.0))),
            Ok(Ok(a)) => a,
        };
        let tcp = match tokio::time::timeout_at(deadline, connect_any(&addrs)).await {
            Err(_) => {
                return Err(SendError::ConnectTimeout(format!("cannot connect to {shown}: connection timed out (--connect-timeout)")))
            }
            Ok(Err(e)) => return Err(SendError::Connect(format!("cannot connect to {shown}: {e}"))),
            Ok(Ok(s)) => s,
        };
        // Small requests go out at once: Nagle's delay would add to every latency measured.
        let _ = tcp.set_nodelay(true);
        self.opened.fetch_add(1, Ordering::Relaxed);
        let clock = Arc::new(ReadClock::default());
        let io = TokioIo::new(Stamped { tcp, clock: Arc::clone(&clock) });
        let (send, io) =
            http1::handshake(io).await.map_err(|e| SendError::Connect(format!("cannot open an HTTP connection to {shown}: {e}")))?;
        Ok(Conn { send, io: Box::pin(io), clock })
    }
}

/// Connects to the first address that accepts, in the resolver's order; the last error otherwise.
async fn connect_any(addrs: &[SocketAddr]) -> std::io::Result<TcpStream> {
    let mut last = None;
    for a in addrs {
        match TcpStream::connect(a).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no address to connect to")))
}

/// A sent request that found its connection closed may be sent again on a new one: a server
/// closing an idle keep-alive connection, not a failure of the request.
fn retryable(e: &hyper::Error) -> bool {
    e.is_canceled() || e.is_incomplete_message() || e.is_closed()
}

/// The detail of a connection that closed or broke before a response head, with its root cause.
fn closed_detail(shown: &str, e: &hyper::Error) -> String {
    use std::error::Error as _;
    let mut cause = String::new();
    let mut src = e.source();
    while let Some(s) = src {
        cause = s.to_string();
        src = s.source();
    }
    if cause.is_empty() {
        format!("{shown}: the connection closed before a response: {e}")
    } else {
        format!("{shown}: the connection closed before a response: {e}: {cause}")
    }
}

/// A connection in use by one request. Its I/O runs only while the request's task awaits through
/// the lease ([`Lease::frame`]); dropped before [`Lease::release`], the connection is closed.
pub struct Lease<'p> {
    pool: &'p Pool,
    key: Key,
    conn: Conn,
    /// The I/O future finished: the connection is closed.
    ended: bool,
}

impl std::fmt::Debug for Lease<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("key", &self.key).field("ended", &self.ended).finish()
    }
}

impl Lease<'_> {
    fn poll_io(&mut self, cx: &mut Context<'_>) {
        // Its outcome also reaches the response or the body (hyper hands the error to both), so
        // only the end matters here.
        if !self.ended && self.conn.io.as_mut().poll(cx).is_ready() {
            self.ended = true;
        }
    }

    async fn request(&mut self, req: Request<Full<Bytes>>) -> Result<Response<Incoming>, hyper::Error> {
        let mut fut = std::pin::pin!(self.conn.send.send_request(req));
        std::future::poll_fn(|cx| {
            self.poll_io(cx);
            fut.as_mut().poll(cx)
        })
        .await
    }

    /// The next frame of `body`, driving the connection's reads; `None` at the body's end.
    pub async fn frame(&mut self, body: &mut Incoming) -> Option<Result<Frame<Bytes>, hyper::Error>> {
        std::future::poll_fn(|cx| {
            self.poll_io(cx);
            Pin::new(&mut *body).poll_frame(cx)
        })
        .await
    }

    /// When the connection last read bytes: the arrival time of the frame just returned.
    pub fn last_read(&self) -> Option<Instant> {
        self.conn.clock.last()
    }

    /// Hands the connection back for another request when its response was read to the end and
    /// it is still open; otherwise closes it.
    pub fn release(mut self) {
        if !self.ended && self.conn.usable() {
            let Lease { pool, key, conn, .. } = self;
            pool.checkin(key, conn);
        }
    }
}

#[cfg(test)]
mod tests {
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
                let len: usize =
                    head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
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
}
