//! A small blocking HTTP/1.1 client for the executor's health, readiness and version requests to
//! the server it launched, on this machine or on a Slurm job's head node (one request per
//! connection; the benchmark uses bench's client).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

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
    /// The connection failed while writing or reading.
    #[error("i/o: {0}")]
    Io(String),
    /// The bytes are not an HTTP/1.x response.
    #[error("not an HTTP response: {0}")]
    Malformed(String),
    /// The head or the body is larger than the client takes.
    #[error("the answer is larger than {0} bytes, more than a health, model list or one-token reply holds")]
    TooLarge(usize),
    /// The whole exchange did not finish within the caller's time limit.
    #[error("no complete answer within {0:?}")]
    TimedOut(Duration),
}

/// The most a response's status line and headers may hold.
pub const MAX_HEAD: usize = 64 * 1024;

/// The most a response's body may hold: health, model lists and one-token completions are a few
/// KB; a server that sends more is broken or hostile, and is not read whole.
pub const MAX_BODY: usize = 8 << 20;

/// GET `path` from `ep`; `timeout` bounds the whole exchange (connect, send, every read).
pub fn get(ep: &Endpoint, path: &str, timeout: Duration) -> Result<Response, HttpError> {
    request(ep, "GET", path, None, timeout)
}

/// POST a JSON `body` to `path` on `ep`; `timeout` bounds the whole exchange.
pub fn post_json(ep: &Endpoint, path: &str, body: &str, timeout: Duration) -> Result<Response, HttpError> {
    request(ep, "POST", path, Some(body), timeout)
}

fn request(ep: &Endpoint, method: &str, path: &str, body: Option<&str>, timeout: Duration) -> Result<Response, HttpError> {
    let deadline = Instant::now().checked_add(timeout).ok_or(HttpError::TimedOut(timeout))?;
    let left = || deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()).ok_or(HttpError::TimedOut(timeout));
    let addr = (ep.host.as_str(), ep.port)
        .to_socket_addrs()
        .map_err(|e| HttpError::Connect(format!("{}: {e}", ep.host)))?
        .next()
        .ok_or_else(|| HttpError::Connect(format!("{} has no address", ep.host)))?;
    let mut s = TcpStream::connect_timeout(&addr, left()?).map_err(|e| HttpError::Connect(e.to_string()))?;
    let io = |e: std::io::Error| HttpError::Io(e.to_string());
    s.set_write_timeout(Some(left()?)).map_err(io)?;
    let host = ep.url();
    let host = host.trim_start_matches("http://");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAccept: application/json\r\n");
    if let Some(b) = body {
        req += &format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len());
    }
    req += "\r\n";
    req += body.unwrap_or("");
    s.write_all(req.as_bytes()).map_err(|e| if Instant::now() >= deadline { HttpError::TimedOut(timeout) } else { io(e) })?;
    let mut within = Deadline { s: &mut s, deadline };
    read_response(&mut within, MAX_BODY).map_err(|e| match e {
        HttpError::Io(_) if Instant::now() >= deadline => HttpError::TimedOut(timeout),
        e => e,
    })
}

/// A socket whose every read waits at most until one deadline: a server trickling one byte a
/// second cannot hold the caller past it (a per-read timeout alone would restart each byte).
struct Deadline<'a> {
    s: &'a mut TcpStream,
    deadline: Instant,
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
        let left = left.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::TimedOut, "the deadline passed"))?;
        self.s.set_read_timeout(Some(left))?;
        self.s.read(buf)
    }
}

/// Reads one HTTP/1.x response from `r`: the status line, the headers, then the body as the
/// headers frame it (chunked, `Content-Length`, or up to the end of the connection), at most
/// `max_body` bytes of it. Interim 1xx responses are skipped. Works on bytes throughout; the body
/// is decoded once it is complete, so a chunk boundary inside a character is harmless.
pub fn read_response(r: &mut impl Read, max_body: usize) -> Result<Response, HttpError> {
    let mut src = Source { r, buf: Vec::new(), pos: 0, eof: false };
    let head = loop {
        let head = read_head(&mut src)?;
        // 101 switches protocols and is final; 100 and 102-199 are interim.
        if !(100..200).contains(&head.status) || head.status == 101 {
            break head;
        }
    };
    let body = match head.framing {
        _ if head.status == 204 || head.status == 304 || head.status == 101 => Vec::new(),
        Framing::Chunked => dechunk(&mut src, max_body)?,
        Framing::Length(n) if n > max_body as u64 => return Err(HttpError::TooLarge(max_body)),
        Framing::Length(n) => src.exact(n as usize)?,
        Framing::UntilClose => src.rest(max_body)?,
    };
    Ok(Response { status: head.status, body: String::from_utf8_lossy(&body).into_owned() })
}

/// How a response's body ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    Chunked,
    Length(u64),
    UntilClose,
}

struct Head {
    status: u16,
    framing: Framing,
}

/// Buffered bytes of a response, read as needed.
struct Source<'a, R: Read> {
    r: &'a mut R,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
}

impl<R: Read> Source<'_, R> {
    /// Reads more; false at the end of the stream.
    fn fill(&mut self) -> Result<bool, HttpError> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let mut chunk = [0u8; 8192];
        let n = loop {
            match self.r.read(&mut chunk) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(HttpError::Io(e.to_string())),
            }
        };
        self.eof = n == 0;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    }

    /// One line without its CRLF (a bare LF is taken too), at most `max` bytes.
    fn line(&mut self, max: usize, what: &str) -> Result<Vec<u8>, HttpError> {
        let mut scanned = 0;
        loop {
            let avail = &self.buf[self.pos..];
            if let Some(i) = avail[scanned..].iter().position(|b| *b == b'\n').map(|i| i + scanned) {
                let mut line = avail[..i].to_vec();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.pos += i + 1;
                return Ok(line);
            }
            scanned = avail.len();
            if scanned > max {
                return Err(HttpError::TooLarge(max));
            }
            if !self.fill()? {
                return Err(HttpError::Malformed(format!("the connection ended inside {what}")));
            }
        }
    }

    /// Consumes a CRLF (or a bare LF); false when the next bytes are something else.
    fn crlf(&mut self) -> Result<bool, HttpError> {
        while self.buf.len() - self.pos < 2 && !self.buf[self.pos..].starts_with(b"\n") {
            if !self.fill()? {
                break;
            }
        }
        let avail = &self.buf[self.pos..];
        let n = if avail.starts_with(b"\r\n") {
            2
        } else if avail.starts_with(b"\n") {
            1
        } else {
            return Ok(false);
        };
        self.pos += n;
        Ok(true)
    }

    /// Exactly `n` bytes.
    fn exact(&mut self, n: usize) -> Result<Vec<u8>, HttpError> {
        while self.buf.len() - self.pos < n {
            if !self.fill()? {
                return Err(HttpError::Malformed(format!("the connection ended after {} of {n} body bytes", self.buf.len() - self.pos)));
            }
        }
        let out = self.buf[self.pos..self.pos + n].to_vec();
        self.pos += n;
        Ok(out)
    }

    /// Everything up to the end of the stream, at most `max` bytes.
    fn rest(&mut self, max: usize) -> Result<Vec<u8>, HttpError> {
        while self.fill()? {
            if self.buf.len() - self.pos > max {
                return Err(HttpError::TooLarge(max));
            }
        }
        if self.buf.len() - self.pos > max {
            return Err(HttpError::TooLarge(max));
        }
        let out = self.buf[self.pos..].to_vec();
        self.pos = self.buf.len();
        Ok(out)
    }
}

fn read_head(src: &mut Source<'_, impl Read>) -> Result<Head, HttpError> {
    let mut used = 0;
    let mut line = |src: &mut Source<'_, _>, what: &str| -> Result<Vec<u8>, HttpError> {
        // The limit is the whole head's: a long line reports it, not what was left of it.
        let l =
            src.line(MAX_HEAD - used, what).map_err(|e| if let HttpError::TooLarge(_) = e { HttpError::TooLarge(MAX_HEAD) } else { e })?;
        used += l.len() + 2;
        if used > MAX_HEAD {
            return Err(HttpError::TooLarge(MAX_HEAD));
        }
        Ok(l)
    };
    let status = status_code(&line(src, "the status line")?)?;
    let (mut chunked, mut te, mut length) = (false, false, None::<u64>);
    loop {
        let l = line(src, "the headers")?;
        if l.is_empty() {
            break;
        }
        let (name, value) = header(&l)?;
        if name.eq_ignore_ascii_case("transfer-encoding") {
            te = true;
            // Only a final `chunked` frames the body; another final coding runs to the close.
            chunked = value.rsplit(',').next().is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
        } else if name.eq_ignore_ascii_case("content-length") {
            let n = content_length(value)?;
            if length.is_some_and(|m| m != n) {
                return Err(HttpError::Malformed(format!("two different Content-Length headers ({} and {n})", length.unwrap_or(n))));
            }
            length = Some(n);
        }
    }
    // A Transfer-Encoding overrides a Content-Length (RFC 9112, 6.3).
    let framing = match (te, chunked, length) {
        (true, true, _) => Framing::Chunked,
        (true, false, _) | (false, _, None) => Framing::UntilClose,
        (false, _, Some(n)) => Framing::Length(n),
    };
    Ok(Head { status, framing })
}

/// `HTTP/1.x NNN[ reason]`.
fn status_code(line: &[u8]) -> Result<u16, HttpError> {
    let bad = || HttpError::Malformed(format!("status line {:?}", String::from_utf8_lossy(&line[..line.len().min(80)])));
    let rest = line.strip_prefix(b"HTTP/1.").ok_or_else(bad)?;
    let (minor, rest) = rest.split_first().ok_or_else(bad)?;
    let code = rest.strip_prefix(b" ").and_then(|r| r.get(..3)).ok_or_else(bad)?;
    if !minor.is_ascii_digit() || !code.iter().all(u8::is_ascii_digit) || !matches!(rest.get(4), None | Some(b' ')) {
        return Err(bad());
    }
    let n = code.iter().fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
    if n < 100 {
        return Err(bad());
    }
    Ok(n)
}

/// `name: value`, the value trimmed; the name a token (no space before the colon).
fn header(line: &[u8]) -> Result<(&str, &str), HttpError> {
    let bad = || HttpError::Malformed(format!("header line {:?}", String::from_utf8_lossy(&line[..line.len().min(80)])));
    let colon = line.iter().position(|b| *b == b':').ok_or_else(bad)?;
    let name = std::str::from_utf8(&line[..colon]).map_err(|_| bad())?;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad());
    }
    // A value may hold obs-text (bytes >= 0x80); the framing headers never do, and only they are read.
    let value = std::str::from_utf8(&line[colon + 1..]).unwrap_or("");
    Ok((name, value.trim_matches([' ', '\t'])))
}

fn content_length(v: &str) -> Result<u64, HttpError> {
    let bad = || HttpError::Malformed(format!("Content-Length {v:?} is not a byte count"));
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    v.parse().map_err(|_| bad())
}

/// The body of a chunked response: `size[;ext]` lines, each chunk's bytes and CRLF, a zero-size
/// chunk and the trailers.
fn dechunk(src: &mut Source<'_, impl Read>, max_body: usize) -> Result<Vec<u8>, HttpError> {
    const MAX_SIZE_LINE: usize = 4096;
    let mut out = Vec::new();
    loop {
        let line = src.line(MAX_SIZE_LINE, "a chunk size line")?;
        let n = chunk_size(&line)?;
        if n == 0 {
            break;
        }
        if n > (max_body - out.len()) as u64 {
            return Err(HttpError::TooLarge(max_body));
        }
        out.extend(src.exact(n as usize)?);
        if !src.crlf()? {
            return Err(HttpError::Malformed(format!("a chunk of {n} bytes is not followed by CRLF")));
        }
    }
    // Trailers, up to the empty line (a close before it is tolerated: the body is complete).
    let mut trailers = 0;
    loop {
        match src.line(MAX_HEAD, "the trailers") {
            Ok(l) if l.is_empty() => return Ok(out),
            Ok(l) => {
                trailers += l.len();
                if trailers > MAX_HEAD {
                    return Err(HttpError::TooLarge(MAX_HEAD));
                }
            }
            Err(HttpError::Malformed(_)) if src.eof => return Ok(out),
            Err(e) => return Err(e),
        }
    }
}

/// A chunk size line: hex digits, then optional whitespace and `;extensions`.
fn chunk_size(line: &[u8]) -> Result<u64, HttpError> {
    let bad = || HttpError::Malformed(format!("chunk size line {:?}", String::from_utf8_lossy(&line[..line.len().min(80)])));
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let after = &line[digits..];
    let ext_ok = after.iter().find(|b| !matches!(b, b' ' | b'\t')).is_none_or(|b| *b == b';');
    if digits == 0 || digits > 15 || !ext_ok {
        return Err(bad());
    }
    let hex = std::str::from_utf8(&line[..digits]).map_err(|_| bad())?;
    u64::from_str_radix(hex, 16).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &[u8]) -> Result<Response, HttpError> {
        read_response(&mut &raw[..], MAX_BODY)
    }

    /// Gives one byte per read, so every boundary falls everywhere.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match (self.0.split_first(), buf.first_mut()) {
                (Some((b, rest)), Some(slot)) => {
                    *slot = *b;
                    self.0 = rest;
                    Ok(1)
                }
                _ => Ok(0),
            }
        }
    }

    #[test]
    fn parses_plain_and_chunked_bodies() {
        let r = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").expect("plain");
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));
        let r = parse(b"HTTP/1.1 503 X\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").expect("chunked");
        assert_eq!((r.status, r.body.as_str()), (503, "abcde"));
        assert!(parse(b"garbage").is_err());
    }

    #[test]
    fn a_chunk_boundary_inside_a_multibyte_character_keeps_the_character() {
        // "é" is C3 A9: the first chunk ends after C3, the second starts with A9.
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\xc3\r\n4\r\n\xa9\":1\r\n1\r\n}\r\n0\r\n\r\n";
        let r = parse(raw).expect("chunked");
        assert_eq!(r.body, "{\"a\u{e9}\":1}");
        assert_eq!(read_response(&mut Trickle(raw), MAX_BODY).expect("trickled"), r);
    }

    #[test]
    fn chunk_extensions_trailers_and_interim_responses_are_http() {
        let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5;foo=bar\r\nhello\r\n0 ; last\r\nX-Trailer: 1\r\n\r\n";
        let r = parse(raw).expect("extensions");
        assert_eq!((r.status, r.body.as_str()), (200, "hello"));
        let until_close = parse(b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\n{\"ok\":true}").expect("close-delimited");
        assert_eq!(until_close.body, "{\"ok\":true}");
        let both =
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n").expect("te wins");
        assert_eq!(both.body, "ok");
        assert_eq!(parse(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n").expect("204").body, "");
    }

    #[test]
    fn malformed_framing_is_an_error_not_a_guess() {
        let cases: [&[u8]; 7] = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 20 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        ];
        for raw in cases {
            let e = parse(raw).expect_err("malformed");
            assert!(matches!(e, HttpError::Malformed(_)), "{:?}: {e}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn a_body_over_the_limit_is_refused_before_it_is_read() {
        /// A `/health` that claims 3 GB and then sends bytes for as long as it is read.
        struct Endless {
            head: &'static [u8],
            sent: usize,
        }
        impl Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = if self.sent < self.head.len() {
                    let n = buf.len().min(self.head.len() - self.sent);
                    buf[..n].copy_from_slice(&self.head[self.sent..self.sent + n]);
                    n
                } else {
                    buf.fill(b'x');
                    buf.len()
                };
                self.sent += n;
                assert!(self.sent < 64 << 20, "read {} bytes of an endless body", self.sent);
                Ok(n)
            }
        }
        for head in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 3000000000\r\n\r\n"[..],
            &b"HTTP/1.1 200 OK\r\n\r\n"[..],
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nB2D05E00\r\n"[..],
        ] {
            let e = read_response(&mut Endless { head, sent: 0 }, 1 << 20).expect_err("too large");
            assert_eq!(e, HttpError::TooLarge(1 << 20), "{}", String::from_utf8_lossy(head));
        }
        let e = read_response(&mut Endless { head: b"HTTP/1.1 200 OK\r\nX-Long: ", sent: 0 }, 1 << 20).expect_err("head");
        assert_eq!(e, HttpError::TooLarge(MAX_HEAD));
    }

    #[test]
    fn a_server_trickling_a_byte_a_moment_does_not_hold_past_the_deadline() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            let Ok((mut c, _)) = l.accept() else { return };
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
            // One byte every 20 ms, far below any per-read timeout, until the client gives up.
            while stop_rx.recv_timeout(Duration::from_millis(20)).is_err() {
                if c.write_all(b"x").is_err() {
                    return;
                }
            }
        });
        let e = get(&Endpoint::local(port), "/health", Duration::from_millis(300)).expect_err("trickle");
        let _ = stop_tx.send(());
        let _ = server.join();
        assert_eq!(e, HttpError::TimedOut(Duration::from_millis(300)));
    }
}
